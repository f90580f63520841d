//! The conjugate operators of Megatron-LM, as candle autograd ops.
//!
//! - `copy_to_tp` (f): forward copy, backward all-reduce.
//! - `reduce_from_tp` (g): forward all-reduce, backward copy; `start_reduce_from_tp` is
//!   g started, its sum waited for later (the ladder block's overlap).
//!
//! They stay visible at the call site (the blocks) instead of hiding inside the linears:
//! in `s` and `p` the MLP input is rank-local, where a built-in `f` would be wrong.
//! A group of one returns its input untouched.
//!
//! Their sums go through [`CountedComm::all_reduce_activation`] and its kin, which send
//! them compressed when the group's `comm_dtype` says (straight-through: the backward of
//! a quantised g is the identity, as of an exact one). Backward passes reduce gradient
//! tensors on their device. g's forward on f32 CPU activations runs inside the op (`cpu_fwd`), summing the
//! host buffer in place; on any other device or dtype it reduces the tensor where it lies
//! and takes the sum's value with the input's gradient ([`reduce_from_tp_on_device`]).

use crate::comm::counted::{CountedComm, PendingSum};
use crate::comm::tally::{CommKind, Site};
use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Tensor};

/// A fresh contiguous copy of a strided input, on whatever backend holds it: the forward
/// of the ops whose only work is in their backward.
fn identity<S>(storage: &S, layout: &Layout) -> Result<(S, Shape)>
where
    S: BackendStorage,
    S::Device: BackendDevice<Storage = S>,
{
    // SAFETY: every element of `dst` is written by the strided copy below.
    let mut dst = unsafe {
        storage
            .device()
            .alloc_uninit(layout.shape(), storage.dtype())?
    };
    storage.copy_strided_src(&mut dst, 0, layout)?;
    Ok((dst, layout.shape().clone()))
}

fn contiguous_f32(storage: &CpuStorage, layout: &Layout) -> Result<Vec<f32>> {
    let data = match storage {
        CpuStorage::F32(d) => d,
        _ => candle_core::bail!("tensor-parallel collectives support f32 tensors only"),
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(data[start..end].to_vec()),
        None => candle_core::bail!("tensor-parallel collective on a non-contiguous tensor"),
    }
}

/// `cpu_fwd` (and `cuda_fwd`) of an op whose forward is the identity.
macro_rules! identity_forward {
    () => {
        fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
            identity(storage, layout)
        }
        #[cfg(feature = "cuda")]
        fn cuda_fwd(
            &self,
            storage: &candle_core::CudaStorage,
            layout: &Layout,
        ) -> Result<(candle_core::CudaStorage, Shape)> {
            identity(storage, layout)
        }
    };
}

struct CopyToTp {
    group: CountedComm,
    site: Site,
}

impl CustomOp1 for CopyToTp {
    fn name(&self) -> &'static str {
        "copy-to-tp"
    }
    identity_forward!();
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        self.group
            .all_reduce_activation(&grad_res.contiguous()?, self.site, CommKind::TpBackward)
            .map(Some)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))
    }
}

struct ReduceFromTp {
    group: CountedComm,
    site: Site,
}

impl CustomOp1 for ReduceFromTp {
    fn name(&self) -> &'static str {
        "reduce-from-tp"
    }
    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let mut v = contiguous_f32(storage, layout)?;
        let width = layout.dims().last().copied().unwrap_or(1);
        self.group
            .all_reduce_activation_host(&mut v, width, self.site, CommKind::TpForward)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        Ok((CpuStorage::F32(v), layout.shape().clone()))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad_res.clone()))
    }
}

/// Which end of a span of layers a trace mark sits at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkAt {
    /// Its input: the mark's backward runs when the layers' backward is done.
    Input,
    /// Its output: the mark's backward runs when their backward begins.
    Output,
}

/// An op whose forward is the identity and whose backward notes, on the rank's trace,
/// where a span of layers' backward begins or ends: candle's backprop has no hooks, so
/// the marks are nodes of the graph (made only on traced steps).
struct TraceMark {
    tally: std::sync::Arc<crate::comm::Tally>,
    key: String,
    at: MarkAt,
}

impl CustomOp1 for TraceMark {
    fn name(&self) -> &'static str {
        "trace-mark"
    }
    identity_forward!();
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let trace = self.tally.trace();
        match self.at {
            MarkAt::Output => trace.begin(&self.key),
            MarkAt::Input => trace.end(&self.key, "layer", format!("{} backward", self.key)),
        }
        Ok(Some(grad_res.clone()))
    }
}

/// `x` marked for the trace as the input or output of the layers `key` names (`x` itself
/// when the rank is not tracing).
pub fn trace_mark(x: &Tensor, group: &CountedComm, key: &str, at: MarkAt) -> Result<Tensor> {
    if !group.tally().trace().is_on() {
        return Ok(x.clone());
    }
    x.apply_op1(TraceMark {
        tally: group.tally().clone(),
        key: key.to_string(),
        at,
    })
}

/// f: forward identity, backward all-reduce of the input gradient over the TP group.
pub fn copy_to_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    if group.size() == 1 {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(CopyToTp {
        group: group.clone(),
        site,
    })
}

/// g: forward all-reduce over the TP group, backward identity.
pub fn reduce_from_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    if group.size() == 1 {
        return Ok(x.clone());
    }
    if !(x.device().is_cpu() && x.dtype() == DType::F32) {
        return reduce_from_tp_on_device(x, group, site);
    }
    x.contiguous()?.apply_op1(ReduceFromTp {
        group: group.clone(),
        site,
    })
}

/// g for tensors on any device and of any float dtype: the group sums `x` where it lies,
/// and `sum + (x - x)` gives that value (exactly: `x - x` is zero for finite `x`) with the
/// identity gradient to `x`, without an op that must run on every backend.
pub fn reduce_from_tp_on_device(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    if group.size() == 1 {
        return Ok(x.clone());
    }
    let x = x.contiguous()?;
    let sum = group
        .all_reduce_activation(&x.detach(), site, CommKind::TpForward)
        .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
    sum.add(&(&x - &x.detach())?)
}

/// g started: the all-reduce of `x` runs while the caller computes.
pub struct PendingReduce {
    x: Tensor,
    sum: Option<PendingSum>,
}

/// Starts g of `x` over the TP group; [`PendingReduce::wait`] gives what
/// [`reduce_from_tp`] would have, bit for bit, with the same identity gradient to `x`.
pub fn start_reduce_from_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<PendingReduce> {
    let x = x.contiguous()?;
    let sum = if group.size() == 1 {
        None
    } else {
        let started = group.start_all_reduce_activation(&x.detach(), site, CommKind::TpForward);
        Some(started.map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?)
    };
    Ok(PendingReduce { x, sum })
}

impl PendingReduce {
    /// The group's sum of `x`, once it is there.
    pub fn wait(self) -> Result<Tensor> {
        let Some(pending) = self.sum else {
            return Ok(self.x);
        };
        let sum = pending
            .wait()
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        if self.x.device().is_cpu() && self.x.dtype() == DType::F32 {
            self.x
                .apply_op1(TakeSum(std::sync::Mutex::new(Some(sum.flatten_all()?))))
        } else {
            // As reduce_from_tp_on_device: the sum's value, x's gradient.
            sum.add(&(&self.x - &self.x.detach())?)
        }
    }
}

/// An op whose forward is a sum computed already (taken once) and whose backward is the
/// identity: g's value and gradient, split from its communication.
struct TakeSum(std::sync::Mutex<Option<Tensor>>);

impl CustomOp1 for TakeSum {
    fn name(&self) -> &'static str {
        "take-sum"
    }
    fn cpu_fwd(&self, _storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let sum = self.0.lock().ok().and_then(|mut s| s.take());
        let Some(sum) = sum else {
            candle_core::bail!("take-sum: the sum was taken already");
        };
        if sum.elem_count() != layout.shape().elem_count() {
            candle_core::bail!(
                "take-sum: the sum has {} values for {:?}",
                sum.elem_count(),
                layout.shape()
            );
        }
        Ok((
            CpuStorage::F32(sum.to_vec1::<f32>()?),
            layout.shape().clone(),
        ))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad_res.clone()))
    }
}

struct ScaleGrad(f64);

impl CustomOp1 for ScaleGrad {
    fn name(&self) -> &'static str {
        "scale-grad"
    }
    identity_forward!();
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some((grad_res * self.0)?))
    }
}

/// Forward identity, backward multiplies the gradient by `1/n`.
///
/// For a replicated parameter whose gradient is partial per rank (summed over the TP group
/// once per step) but which is *also* used on a replicated value: every rank holds that
/// use's whole contribution, so each contributes `1/n` of it and the group sum counts it
/// exactly once. The forward value is untouched (unlike adding `b/n` inside the sum).
pub fn share_grad_over_tp(x: &Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(ScaleGrad(1.0 / n as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn on_two_ranks<R: Send>(f: impl Fn(CountedComm) -> R + Sync) -> Vec<R> {
        crate::comm::counted::on_thread_ranks(2, f)
    }

    fn site() -> Site {
        Site::Layer(0)
    }

    /// The device path of g (used on GPUs and for bf16) gives the in-op CPU path's
    /// forward values and input gradients bit for bit.
    #[test]
    fn g_on_device_equals_g_in_op_forward_and_backward() {
        let out = on_two_ranks(|g| {
            let vals: Vec<f32> = (0..12)
                .map(|i| ((g.rank() * 12 + i) as f32 * 0.91).cos() * 3.0)
                .collect();
            let run = |on_device: bool| {
                let x = Var::from_vec(vals.clone(), (3, 4), &Device::Cpu).unwrap();
                let y = if on_device {
                    reduce_from_tp_on_device(x.as_tensor(), &g, site()).unwrap()
                } else {
                    reduce_from_tp(x.as_tensor(), &g, site()).unwrap()
                };
                let w = Tensor::arange(0f32, 12.0, &Device::Cpu)
                    .unwrap()
                    .reshape((3, 4))
                    .unwrap();
                let grads = (y.clone() * w)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap();
                let gx = grads.get(x.as_tensor()).unwrap().flatten_all().unwrap();
                (
                    y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    gx.to_vec1::<f32>().unwrap(),
                )
            };
            (run(false), run(true))
        });
        for ((y_op, gx_op), (y_dev, gx_dev)) in out {
            assert_eq!(y_op, y_dev);
            assert_eq!(gx_op, gx_dev);
            assert_eq!(gx_op, (0..12).map(|i| i as f32).collect::<Vec<_>>());
        }
    }

    /// f and g accept bf16 activations: f's backward and g's forward sum over the group.
    #[test]
    fn f_and_g_carry_bf16_activations() {
        let out = on_two_ranks(|g| {
            let x = Var::from_vec(vec![1.0f32 + g.rank() as f32; 4], 4, &Device::Cpu).unwrap();
            let x16 = x.as_tensor().to_dtype(DType::BF16).unwrap();
            let y = reduce_from_tp(&copy_to_tp(&x16, &g, site()).unwrap(), &g, site()).unwrap();
            assert_eq!(y.dtype(), DType::BF16);
            let grads = y
                .to_dtype(DType::F32)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let gx = grads.get(x.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            (
                y.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(),
                gx,
            )
        });
        for (y, gx) in out {
            assert_eq!(y, vec![3.0; 4]);
            assert_eq!(gx, vec![2.0; 4]);
        }
    }
}
