//! AdamW with decoupled weight decay (PyTorch's formulation). Decay applies only to
//! tensors of dim >= 2 (nanoGPT's groups). The moments are tensors on the parameters'
//! device, in registry order, so they can be saved and restored through the same sharding
//! code as the weights.
//!
//! Two paths compute the same update: with `kernels: fused` on the CPU, one pass over
//! each parameter updates it and its moments in place; otherwise (`portable`, or any other
//! device) candle's tensor ops compute it.

use super::grads::GradBuffer;
use crate::device::Kernels;
use crate::ops::adamw::AdamWScalars;
use crate::ops::cpu::simd::simd_kernel;
use crate::ops::profile::{timed, OpKind};
use crate::tp::ParamRegistry;
use anyhow::{bail, Result};
use candle_core::{CpuStorage, InplaceOp1, Layout, Storage, Tensor};
use std::cell::RefCell;

#[derive(Debug, Clone, Copy)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

pub struct AdamW {
    pub cfg: AdamWConfig,
    /// Steps taken (bias correction).
    pub t: u64,
    /// First and second moments, registry order, on each parameter's device.
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    decay: Vec<bool>,
    kernels: Kernels,
}

struct Update<'a> {
    grad: &'a [f32],
    m: RefCell<&'a mut [f32]>,
    v: RefCell<&'a mut [f32]>,
    lr: f32,
    decay: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    /// 1 / (1 - beta^t)
    c1: f32,
    c2: f32,
    /// Gradient clipping's factor (1: none), applied as the gradient is read.
    grad_scale: f32,
}

impl InplaceOp1 for Update<'_> {
    fn name(&self) -> &'static str {
        "adamw"
    }
    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("adamw: parameters must be f32");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("adamw: parameter is not contiguous");
        };
        let p = &mut data[start..end];
        let mut m = self.m.borrow_mut();
        let mut v = self.v.borrow_mut();
        let (b1, b2, lr, eps, c1, c2) = (self.b1, self.b2, self.lr, self.eps, self.c1, self.c2);
        let shrink = 1.0 - lr * self.decay;
        let flops = 14.0 * p.len() as f64;
        let k = AdamWScalars {
            b1,
            b2,
            lr,
            eps,
            c1,
            c2,
            shrink,
            grad_scale: self.grad_scale,
        };
        let (m, v): (&mut [f32], &mut [f32]) = (&mut m, &mut v);
        timed(OpKind::AdamW, flops, || {
            // Element-wise, so any split gives the same bits: large parameters (GPT-2's
            // 50304-wide embedding) are spread over the rank's threads.
            const CHUNK: usize = 1 << 15;
            if crate::ops::cpu::gemm::threads() <= 1 || p.len() <= CHUNK {
                return adamw_pass(p, self.grad, m, v, k);
            }
            use rayon::prelude::*;
            p.par_chunks_mut(CHUNK)
                .zip(self.grad.par_chunks(CHUNK))
                .zip(m.par_chunks_mut(CHUNK))
                .zip(v.par_chunks_mut(CHUNK))
                .for_each(|(((p, g), m), v)| adamw_pass(p, g, m, v, k));
        });
        Ok(())
    }
}

simd_kernel! {
/// One pass of AdamW over a parameter, its gradient and both moments.
fn adamw_pass(p: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32], k: AdamWScalars) {
    let AdamWScalars { b1, b2, lr, eps, c1, c2, shrink, grad_scale } = k;
    for (((p, &g), m), v) in p.iter_mut().zip(grad).zip(m.iter_mut()).zip(v.iter_mut()) {
        // The same f32 product a clipped gradient tensor would hold.
        let g = if grad_scale == 1.0 { g } else { g * grad_scale };
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        *p = *p * shrink - lr * (*m * c1) / ((*v * c2).sqrt() + eps);
    }
}
}

/// Runs `f` on the contiguous f32 data of a CPU tensor, mutably, in place.
struct InPlace<'a, F: FnMut(&mut [f32])>(RefCell<&'a mut F>);

impl<F: FnMut(&mut [f32])> InplaceOp1 for InPlace<'_, F> {
    fn name(&self) -> &'static str {
        "in-place"
    }
    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("adamw: parameters and moments must be f32");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("adamw: tensor is not contiguous");
        };
        (self.0.borrow_mut())(&mut data[start..end]);
        Ok(())
    }
}

fn with_mut(t: &Tensor, mut f: impl FnMut(&mut [f32])) -> Result<()> {
    t.inplace_op1(&InPlace(RefCell::new(&mut f)))?;
    Ok(())
}

/// The contiguous f32 data of a CPU tensor.
fn with_host<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(d)), Some((a, b))) = (&*storage, layout.contiguous_offsets())
    else {
        bail!("adamw: a gradient is not a contiguous f32 CPU tensor");
    };
    Ok(f(&d[a..b]))
}

impl AdamW {
    /// Zero moments for every parameter of `reg`, on its device.
    pub fn new(reg: &ParamRegistry, cfg: AdamWConfig, kernels: Kernels) -> Result<Self> {
        let zeros = || -> Result<Vec<Tensor>> {
            Ok(reg
                .iter()
                .map(|p| p.var.zeros_like())
                .collect::<candle_core::Result<_>>()?)
        };
        Ok(Self {
            cfg,
            t: 0,
            m: zeros()?,
            v: zeros()?,
            decay: reg.iter().map(|p| p.full_shape.len() >= 2).collect(),
            kernels,
        })
    }

    /// Restores the step count and moments (registry order, this rank's shapes).
    pub fn restore(&mut self, t: u64, m: Vec<Tensor>, v: Vec<Tensor>) -> Result<()> {
        let fits = |x: &[Tensor]| {
            x.len() == self.m.len() && x.iter().zip(&self.m).all(|(a, b)| a.shape() == b.shape())
        };
        if !fits(&m) || !fits(&v) {
            bail!("optimizer state does not fit the model's parameters");
        }
        self.t = t;
        self.m = m;
        self.v = v;
        Ok(())
    }

    /// Whether parameter `i` (registry order) is weight-decayed.
    pub fn decays(&self, i: usize) -> bool {
        self.decay[i]
    }

    /// One AdamW step on every parameter with its gradient times `grad_scale` (gradient
    /// clipping's factor, 1 for none): folded into the update instead of a pass of its own
    /// over all gradients, with the same f32 products.
    pub fn step(
        &mut self,
        reg: &ParamRegistry,
        grads: &GradBuffer,
        lr: f64,
        grad_scale: f32,
    ) -> Result<()> {
        if reg.len() != self.m.len() {
            bail!(
                "optimizer state has {} tensors, model has {}",
                self.m.len(),
                reg.len()
            );
        }
        self.t += 1;
        let c1 = 1.0 / (1.0 - self.cfg.beta1.powi(self.t as i32));
        let c2 = 1.0 / (1.0 - self.cfg.beta2.powi(self.t as i32));
        for (i, p) in reg.iter().enumerate() {
            let decay = if self.decay[i] {
                self.cfg.weight_decay
            } else {
                0.0
            };
            let param = p.var.as_tensor();
            let fused = self.kernels.on(param.device()) == Kernels::Fused;
            if param.device().is_cpu() && fused {
                self.fused_update(i, param, grads.get(i), lr, decay, c1, c2, grad_scale)?;
            } else if param.device().is_cuda() && fused {
                let (c, lr) = (&self.cfg, lr as f32);
                let k = AdamWScalars {
                    b1: c.beta1 as f32,
                    b2: c.beta2 as f32,
                    lr,
                    eps: c.eps as f32,
                    c1: c1 as f32,
                    c2: c2 as f32,
                    shrink: 1.0 - lr * decay as f32,
                    grad_scale,
                };
                self.cuda_update(i, param, grads.get(i), k)?;
            } else {
                let (m, v) = (&self.m[i], &self.v[i]);
                let g = grads.get(i);
                let g = &if grad_scale == 1.0 {
                    g.clone()
                } else {
                    g.broadcast_mul(&Tensor::new(grad_scale, g.device())?)?
                };
                let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
                let m = ((m * b1)? + (g * (1.0 - b1))?)?;
                let v = ((v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
                let step = ((&m * c1)? / ((&v * c2)?.sqrt()? + self.cfg.eps)?)?;
                let new = ((param * (1.0 - lr * decay))? - (step * lr)?)?;
                p.var.set(&new)?;
                self.m[i] = m;
                self.v[i] = v;
            }
        }
        Ok(())
    }

    /// The fused update on a GPU: one kernel a parameter (`ops::cuda::adamw`).
    #[cfg(feature = "cuda")]
    fn cuda_update(&self, i: usize, param: &Tensor, grad: &Tensor, k: AdamWScalars) -> Result<()> {
        Ok(crate::ops::cuda::adamw::adamw(
            param, grad, &self.m[i], &self.v[i], k,
        )?)
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda_update(&self, _: usize, _: &Tensor, _: &Tensor, _: AdamWScalars) -> Result<()> {
        unreachable!("a CPU build has no CUDA tensors")
    }

    /// One pass over parameter `i` on the CPU, updating it and its moments in place.
    #[allow(clippy::too_many_arguments)]
    fn fused_update(
        &self,
        i: usize,
        param: &Tensor,
        grad: &Tensor,
        lr: f64,
        decay: f64,
        c1: f64,
        c2: f64,
        grad_scale: f32,
    ) -> Result<()> {
        let mut status: Result<()> = Ok(());
        with_mut(&self.m[i], |m| {
            let r = with_mut(&self.v[i], |v| {
                let op = |g: &[f32]| {
                    param.inplace_op1(&Update {
                        grad: g,
                        m: RefCell::new(&mut *m),
                        v: RefCell::new(v),
                        lr: lr as f32,
                        decay: decay as f32,
                        b1: self.cfg.beta1 as f32,
                        b2: self.cfg.beta2 as f32,
                        eps: self.cfg.eps as f32,
                        c1: c1 as f32,
                        c2: c2 as f32,
                        grad_scale,
                    })
                };
                status = with_host(grad, op).and_then(|r| Ok(r?));
            });
            if let Err(e) = r {
                status = Err(e);
            }
        })?;
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn one_pass_adamw_matches_the_textbook_update_over_several_steps() {
        let (b1, b2, eps, wd, lr) = (0.9f64, 0.99f64, 1e-8f64, 0.1f64, 1e-2f64);
        let p0: Vec<f32> = (0..37).map(|i| ((i as f32) * 0.37).sin()).collect();
        let param = Tensor::new(p0.as_slice(), &Device::Cpu).unwrap();
        let (mut m, mut v) = (vec![0f32; 37], vec![0f32; 37]);
        // Reference in f64: PyTorch's AdamW (decoupled decay, bias-corrected moments).
        let mut rp: Vec<f64> = p0.iter().map(|&x| x as f64).collect();
        let (mut rm, mut rv) = (vec![0f64; 37], vec![0f64; 37]);
        for t in 1..=5 {
            let g: Vec<f32> = (0..37).map(|i| ((i * t) as f32 * 0.11).cos()).collect();
            let (c1, c2) = (1.0 / (1.0 - b1.powi(t)), 1.0 / (1.0 - b2.powi(t)));
            let op = Update {
                grad: &g,
                m: RefCell::new(&mut m),
                v: RefCell::new(&mut v),
                lr: lr as f32,
                decay: wd as f32,
                b1: b1 as f32,
                b2: b2 as f32,
                eps: eps as f32,
                c1: c1 as f32,
                c2: c2 as f32,
                grad_scale: 0.5,
            };
            param.inplace_op1(&op).unwrap();
            for i in 0..37 {
                // Clipped by one half as the update reads the gradient.
                let gi = (g[i] * 0.5) as f64;
                rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
                rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
                rp[i] -= lr * wd * rp[i];
                rp[i] -= lr * (rm[i] * c1) / ((rv[i] * c2).sqrt() + eps);
            }
        }
        let got = param.to_vec1::<f32>().unwrap();
        for (a, b) in got.iter().zip(&rp) {
            assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    /// A parameter larger than one chunk is updated over several threads with the bits
    /// of the one-thread pass.
    #[test]
    fn adamw_over_threads_gives_the_bits_of_one_thread() {
        let n = 100_003;
        let run = |threads: usize| {
            let p0: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.013).sin()).collect();
            let g: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.007).cos()).collect();
            let param = Tensor::new(p0.as_slice(), &Device::Cpu).unwrap();
            let (mut m, mut v) = (vec![0.1f32; n], vec![0.2f32; n]);
            let op = Update {
                grad: &g,
                m: RefCell::new(&mut m),
                v: RefCell::new(&mut v),
                lr: 1e-3,
                decay: 0.1,
                b1: 0.9,
                b2: 0.99,
                eps: 1e-8,
                c1: 10.0,
                c2: 100.0,
                grad_scale: 0.75,
            };
            crate::ops::cpu::gemm::with_threads(threads, || param.inplace_op1(&op).unwrap());
            (param.to_vec1::<f32>().unwrap(), m, v)
        };
        assert_eq!(run(1), run(2));
    }
}
