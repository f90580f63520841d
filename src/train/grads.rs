//! One rank's gradients: a tensor per parameter on the model's device, in registry (name)
//! order, and what a step does with them across ranks: the TP sum of partial gradients,
//! the DP average, the global norm and clipping.
//!
//! Name order is the same on every rank, so the flattened buckets line up element for
//! element (candle's `VarMap` is a HashMap and would not).

use crate::comm::{CommKind, CountedComm, Reduce, Site};
use crate::device::Kernels;
use crate::ops::cpu::simd::simd_kernel;
use crate::tp::{ParamKind, ParamRegistry};
use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Storage, Tensor, TensorId};
use std::collections::HashMap;

pub struct GradBuffer {
    /// The gradient of each parameter, registry order, the parameter's (local) shape;
    /// `None` while it is zero (no allocation, no adding into zeros).
    grads: Vec<Option<Tensor>>,
    /// A zero of each parameter's shape, made once.
    zeros: Vec<Tensor>,
    kinds: Vec<ParamKind>,
    /// Each parameter's index, by its variable's id (what backprop names it by).
    index: HashMap<TensorId, usize>,
}

simd_kernel! {
/// The sum of squares of `x` in f64 over eight interleaved accumulators, added up in a
/// fixed order: vectorisable, and the same bits at every SIMD level.
fn squares_f64(x: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            let v = c[i] as f64;
            acc[i] += v * v;
        }
    }
    let mut s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for &v in rest {
        s += (v as f64) * (v as f64);
    }
    s
}
}

/// The sum of the squares of every tensor of `ts` in f64, added tensor by tensor in order.
/// On the CPU each is read in place ([`add_squares`]); on a GPU, with `kernels: fused`
/// and f32 gradients, all of them in two kernels (`ops::cuda::sumsq`), else each summed on
/// the device ([`device_squares`]); either way read back together: one synchronisation a
/// norm, not one a tensor.
fn sum_of_squares<'a>(ts: impl Iterator<Item = &'a Tensor>, kernels: Kernels) -> Result<f64> {
    let mut acc = 0f64;
    let mut on_device: Vec<&Tensor> = Vec::new();
    for t in ts {
        if t.device().is_cpu() {
            add_squares(t, &mut acc)?;
        } else {
            on_device.push(t);
        }
    }
    #[cfg(feature = "cuda")]
    if let Some(first) = on_device.first() {
        if kernels.on(first.device()) == Kernels::Fused
            && on_device.iter().all(|t| t.dtype() == DType::F32)
            && crate::device::cuda_path_on(crate::device::CudaPath::GradNorm)
        {
            return Ok(acc + crate::ops::cuda::sumsq::sum_of_squares(&on_device)?);
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = kernels;
    let on_device: Vec<Tensor> = on_device
        .into_iter()
        .map(device_squares)
        .collect::<Result<_>>()?;
    if !on_device.is_empty() {
        for s in Tensor::stack(&on_device, 0)?.to_vec1::<f64>()? {
            acc += s;
        }
    }
    Ok(acc)
}

/// The sum of the squares of a device tensor in f64, as a 0-d tensor on the device, summed
/// over its rows first: candle's CUDA `sum_all` reduces in a single thread block (one block
/// per output element), which for GPT-2 124M's gradients (wte alone 38.6 M elements) made
/// the norm ~90 ms of an H100 step.
fn device_squares(t: &Tensor) -> Result<Tensor> {
    let sq = t.to_dtype(DType::F64)?.sqr()?;
    let rows = match sq.rank() {
        0 | 1 => sq,
        r => sq.sum(r - 1)?,
    };
    Ok(rows.sum_all()?)
}

/// Adds the squares of `t` to `acc` in f64. On the CPU it reads in place, in fixed blocks
/// summed in parallel and added in order: the same bits for any thread count (a large
/// model's norm is one pass over all its gradients, so it is worth the threads); a CPU
/// tensor of another dtype or layout goes through candle.
fn add_squares(t: &Tensor, acc: &mut f64) -> Result<()> {
    if t.device().is_cpu() {
        let t = t.contiguous()?;
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::F32(d)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            const BLOCK: usize = 1 << 16;
            let d = &d[a..b];
            let parts: Vec<f64> = if crate::ops::cpu::gemm::threads() > 1 && d.len() > BLOCK {
                use rayon::prelude::*;
                d.par_chunks(BLOCK).map(squares_f64).collect()
            } else {
                d.chunks(BLOCK).map(squares_f64).collect()
            };
            for p in parts {
                *acc += p;
            }
            return Ok(());
        }
    }
    *acc += t
        .to_dtype(DType::F64)?
        .sqr()?
        .sum_all()?
        .to_scalar::<f64>()?;
    Ok(())
}

/// `t * c` elementwise, exactly (no `+ 0` of an affine map).
fn times(t: &Tensor, c: f32) -> Result<Tensor> {
    Ok(t.broadcast_mul(&Tensor::new(c, t.device())?)?)
}

impl GradBuffer {
    pub fn new(reg: &ParamRegistry) -> Result<Self> {
        Ok(Self {
            grads: reg.iter().map(|_| None).collect(),
            zeros: reg
                .iter()
                .map(|p| p.var.zeros_like())
                .collect::<candle_core::Result<_>>()?,
            kinds: reg.iter().map(|p| p.kind).collect(),
            index: reg
                .iter()
                .enumerate()
                .map(|(i, p)| (p.var.as_tensor().id(), i))
                .collect(),
        })
    }

    pub fn zero(&mut self) {
        self.grads.iter_mut().for_each(|g| *g = None);
    }

    /// The gradient of parameter `i` (registry order).
    pub fn get(&self, i: usize) -> &Tensor {
        self.grads[i].as_ref().unwrap_or(&self.zeros[i])
    }

    /// The gradient of parameter `i`, copied to host memory (tests, inspection).
    pub fn host(&self, i: usize) -> Result<Vec<f32>> {
        Ok(self.get(i).flatten_all()?.to_vec1::<f32>()?)
    }

    /// Adds `scale * grad` of every parameter from a backward pass. A parameter that the
    /// loss does not reach keeps its gradient.
    pub fn accumulate(&mut self, reg: &ParamRegistry, grads: &GradStore, scale: f32) -> Result<()> {
        for (i, p) in reg.iter().enumerate() {
            if let Some(g) = grads.get(p.var.as_tensor()) {
                self.add(i, g, scale)?;
            }
        }
        Ok(())
    }

    /// Adds `scale * g` to the gradient of parameter `i`. The gradient is detached from
    /// the backward graph that made it: candle's gradients carry the ops that computed them
    /// (a weight's gradient holds the step's activations), and the optimiser's moments,
    /// built from them and kept across steps, would otherwise hold every step's graph
    /// alive — on the GPU, where AdamW runs as tensor ops, the default experiment grew by
    /// ~80 MB a step until the H100 ran out of memory.
    pub fn add(&mut self, i: usize, g: &Tensor, scale: f32) -> Result<()> {
        let g = g.detach();
        let g = if scale == 1.0 { g } else { times(&g, scale)? };
        let acc = &mut self.grads[i];
        *acc = Some(match acc.take() {
            None => g,
            Some(a) => (a + g)?,
        });
        Ok(())
    }

    /// The index of the parameter whose variable `t` is, if it is one of them.
    pub fn index_of(&self, t: &Tensor) -> Option<usize> {
        self.index.get(&t.id()).copied()
    }

    pub fn len(&self) -> usize {
        self.grads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.grads.is_empty()
    }

    pub fn kind(&self, i: usize) -> ParamKind {
        self.kinds[i]
    }

    /// The bytes of every gradient this rank holds.
    pub fn total_bytes(&self) -> usize {
        (0..self.len()).map(|i| self.bytes(i)).sum()
    }

    /// The bytes of parameter `i`'s gradient (f32).
    pub fn bytes(&self, i: usize) -> usize {
        self.zeros[i].elem_count() * 4
    }

    fn indices(&self, pick: impl Fn(ParamKind) -> bool) -> Vec<usize> {
        (0..self.grads.len())
            .filter(|&i| pick(self.kinds[i]))
            .collect()
    }

    /// The gradients `ids` flattened into one bucket, in that order.
    pub fn flatten(&self, ids: &[usize]) -> Result<Tensor> {
        let flat: Vec<Tensor> = ids
            .iter()
            .map(|&i| self.get(i).flatten_all())
            .collect::<candle_core::Result<_>>()?;
        Ok(Tensor::cat(&flat, 0)?)
    }

    /// Takes the gradients `ids` back from `bucket` ([`Self::flatten`]'s layout).
    pub fn unflatten(&mut self, ids: &[usize], bucket: &Tensor) -> Result<()> {
        let mut at = 0;
        for &i in ids {
            let shape = self.zeros[i].shape();
            let n = shape.elem_count();
            self.grads[i] = Some(bucket.narrow(0, at, n)?.reshape(shape)?);
            at += n;
        }
        Ok(())
    }

    /// One collective over the gradients `ids`, flattened into one bucket.
    fn reduce_bucket(
        &mut self,
        ids: &[usize],
        reduce: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let bucket = reduce(&self.flatten(ids)?)?;
        self.unflatten(ids, &bucket)
    }

    /// Sums the gradients of `ReplicatedPartial` parameters over the TP group in one
    /// bucketed all-reduce: after it, every rank holds the full, identical gradient.
    pub fn sync_tp_partial(&mut self, tp: &CountedComm) -> Result<()> {
        if !tp.communicates() {
            return Ok(());
        }
        let ids = self.indices(|k| k == ParamKind::ReplicatedPartial);
        self.reduce_bucket(&ids, |b| {
            tp.all_reduce(b, Reduce::Sum, Site::Params, CommKind::TpParamGrad)
        })
    }

    /// Averages all gradients over the data-parallel group in one bucketed all-reduce.
    pub fn average_dp(&mut self, dp: &CountedComm) -> Result<()> {
        if !dp.communicates() {
            return Ok(());
        }
        let ids: Vec<usize> = (0..self.grads.len()).collect();
        self.reduce_bucket(&ids, |b| {
            dp.all_reduce(b, Reduce::Mean, Site::Params, CommKind::DpGrad)
        })
    }

    /// Global L2 norm of the logical gradient: sharded parts summed over the TP group,
    /// each replicated parameter counted once. Call after [`Self::sync_tp_partial`].
    pub fn global_norm(&self, tp: &CountedComm, kernels: Kernels) -> Result<f32> {
        let sq = |ids: Vec<usize>| sum_of_squares(ids.into_iter().map(|i| self.get(i)), kernels);
        let sharded = sq(self.indices(|k| matches!(k, ParamKind::Sharded(_))))?;
        let replicated = sq(self.indices(|k| !matches!(k, ParamKind::Sharded(_))))?;
        let mut buf = [sharded as f32];
        super::host_sums::reduce_host(tp, &mut buf, Reduce::Sum, Site::Params)?;
        Ok((buf[0] as f64 + replicated).sqrt() as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The norm's sum of squares: the same bits for one thread or several, and the exact
    /// f64 sum to rounding.
    #[test]
    fn sum_of_squares_is_thread_count_independent_and_exact_to_rounding() {
        let v: Vec<f32> = (0..300_007)
            .map(|i| ((i as f32) * 0.001).sin() * 3.0)
            .collect();
        let t = Tensor::from_vec(v.clone(), v.len(), &Device::Cpu).unwrap();
        let run = |threads: usize| {
            let mut acc = 0f64;
            crate::ops::cpu::gemm::with_threads(threads, || add_squares(&t, &mut acc)).unwrap();
            acc
        };
        let (one, two) = (run(1), run(2));
        assert_eq!(one.to_bits(), two.to_bits());
        let exact: f64 = v.iter().map(|&x| (x as f64) * (x as f64)).sum();
        assert!((one - exact).abs() <= exact * 1e-12, "{one} vs {exact}");
    }

    /// The device path of the norm (rows first, one read-back) sums the same squares as
    /// the in-place CPU path, for tensors of rank 1, 2 and 3, to f64 rounding.
    #[test]
    fn device_sum_of_squares_matches_the_in_place_sum() {
        let v: Vec<f32> = (0..6144).map(|i| ((i as f32) * 0.37).cos() * 2.0).collect();
        let shapes: [&[usize]; 3] = [&[6144], &[48, 128], &[4, 12, 128]];
        let ts: Vec<Tensor> = shapes
            .iter()
            .map(|s| Tensor::from_vec(v.clone(), *s, &Device::Cpu).unwrap())
            .collect();
        let mut want = 0f64;
        for t in &ts {
            add_squares(t, &mut want).unwrap();
        }
        let parts: Vec<Tensor> = ts.iter().map(|t| device_squares(t).unwrap()).collect();
        let got: f64 = Tensor::stack(&parts, 0)
            .unwrap()
            .to_vec1::<f64>()
            .unwrap()
            .iter()
            .sum();
        assert!((got - want).abs() <= want * 1e-12, "{got} vs {want}");
        assert_eq!(
            sum_of_squares(ts.iter(), Kernels::Fused).unwrap().to_bits(),
            want.to_bits(),
            "CPU tensors take the in-place path"
        );
    }

    /// A gradient taken into the buffer no longer holds the backward graph that made it
    /// (candle's do: a weight's gradient references the step's activations), so nothing
    /// built from it and kept across steps — the optimiser's moments — keeps a step alive.
    #[test]
    fn buffered_gradients_hold_no_backward_graph() {
        // Two layers: the second weight's gradient is the first layer's output (an
        // activation with a graph) times the output's gradient.
        let w1 = candle_core::Var::new(&[[0.5f32, -1.5], [2.0, 0.25]], &Device::Cpu).unwrap();
        let w = candle_core::Var::new(&[[1f32, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap();
        let x = Tensor::new(&[[0.5f32, -1.0]], &Device::Cpu).unwrap();
        let h = x.matmul(w1.as_tensor()).unwrap();
        let loss = h
            .matmul(w.as_tensor())
            .unwrap()
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap();
        let store = loss.backward().unwrap();
        let g = store.get(w.as_tensor()).unwrap();
        assert!(
            g.track_op(),
            "candle's gradient carries its graph (the premise)"
        );
        let mut buf = GradBuffer {
            grads: vec![None],
            zeros: vec![w.zeros_like().unwrap()],
            kinds: vec![ParamKind::Replicated],
            index: HashMap::from([(w.as_tensor().id(), 0)]),
        };
        for scale in [1.0, 0.5] {
            buf.add(0, g, scale).unwrap();
            assert!(
                !buf.get(0).track_op(),
                "scale {scale}: the buffer kept the graph"
            );
        }
        // The values are the gradient's: 1.5 * g (two adds, scales 1 and 0.5).
        let want: Vec<f32> = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let got = buf.host(0).unwrap();
        assert_eq!(got, want.iter().map(|v| v * 1.5).collect::<Vec<_>>());
    }
}
