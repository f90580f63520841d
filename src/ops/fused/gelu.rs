//! GELU, exact (erf) or tanh form, with the fast vectorisable erf/tanh of `fastmath`.

use super::storage::{map_blocks, slice_of, with_f32};
use crate::ops::fastmath;
use crate::ops::profile::{timed, OpKind};
use crate::ops::simd::simd_kernel;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

struct Gelu {
    tanh: bool,
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
const INV_SQRT_2PI: f32 = 0.398_942_3;

#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + fastmath::erf_and_gauss(x * INV_SQRT_2).0)
}

#[inline(always)]
fn gelu_erf_grad(x: f32) -> f32 {
    // d/dx x * Phi(x) = Phi(x) + x * phi(x); e^(-(x/sqrt2)^2) is phi's exponential.
    let (erf, gauss) = fastmath::erf_and_gauss(x * INV_SQRT_2);
    0.5 * (1.0 + erf) + x * gauss * INV_SQRT_2PI
}

#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + fastmath::tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

#[inline(always)]
fn gelu_tanh_grad(x: f32) -> f32 {
    let t = fastmath::tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
}

simd_kernel! {
/// `y = gelu(x)` on a block.
fn forward_block(x: &[f32], y: &mut [f32], tanh: bool) {
    if tanh {
        y.iter_mut().zip(x).for_each(|(y, &v)| *y = gelu_tanh(v));
    } else {
        y.iter_mut().zip(x).for_each(|(y, &v)| *y = gelu_erf(v));
    }
}
}

simd_kernel! {
/// `dx = g * gelu'(x)` on a block.
fn backward_block(x: &[f32], g: &[f32], dx: &mut [f32], tanh: bool) {
    let it = dx.iter_mut().zip(x).zip(g);
    if tanh {
        it.for_each(|((d, &v), &g)| *d = g * gelu_tanh_grad(v));
    } else {
        it.for_each(|((d, &v), &g)| *d = g * gelu_erf_grad(v));
    }
}
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "fused-gelu"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s, l)?;
        let y = timed(OpKind::GeluFwd, 0.0, || {
            let tanh = self.tanh;
            map_blocks(x, |_, x, y| forward_block(x, y, tanh))
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let tanh = self.tanh;
        let dx = with_f32(x, |x| {
            with_f32(grad, |g| {
                timed(OpKind::GeluBwd, 0.0, || {
                    map_blocks(x, |at, xb, dx| {
                        backward_block(xb, &g[at..at + xb.len()], dx, tanh)
                    })
                })
            })
        })??;
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

pub fn gelu(x: &Tensor, tanh: bool) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu { tanh })
}
