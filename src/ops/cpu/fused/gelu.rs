//! GELU, exact (erf) or tanh form, with the fast vectorisable erf/tanh of `fastmath`.

use super::storage::{map_blocks, slice_of, with_f32};
use crate::ops::cpu::fastmath;
#[cfg(target_arch = "x86_64")]
use crate::ops::cpu::fastmath_avx2::{erf_and_gauss8, tanh8};
#[cfg(target_arch = "x86_64")]
use crate::ops::cpu::fastmath_avx512::{erf_and_gauss16, tanh16};
use crate::ops::cpu::simd::{simd_kernel, SimdLevel};
use crate::ops::profile::{timed, OpKind};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

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

/// `y = gelu(x)` on a block: by hand at AVX-512 ([`forward_avx512`]) and AVX2
/// ([`forward_avx2`]), auto-vectorised otherwise.
fn forward_block(x: &[f32], y: &mut [f32], tanh: bool) {
    #[cfg(target_arch = "x86_64")]
    match crate::ops::cpu::simd::level() {
        // SAFETY: a level is in force only where the CPU has its features.
        SimdLevel::Avx512 => return unsafe { forward_avx512(x, y, tanh) },
        SimdLevel::Avx2 => return unsafe { forward_avx2(x, y, tanh) },
        SimdLevel::Scalar => {}
    }
    forward_block_auto(x, y, tanh)
}

/// `dx = g * gelu'(x)` on a block, chosen as [`forward_block`] is.
fn backward_block(x: &[f32], g: &[f32], dx: &mut [f32], tanh: bool) {
    #[cfg(target_arch = "x86_64")]
    match crate::ops::cpu::simd::level() {
        // SAFETY: as in forward_block.
        SimdLevel::Avx512 => return unsafe { backward_avx512(x, g, dx, tanh) },
        SimdLevel::Avx2 => return unsafe { backward_avx2(x, g, dx, tanh) },
        SimdLevel::Scalar => {}
    }
    backward_block_auto(x, g, dx, tanh)
}

simd_kernel! {
/// `y = gelu(x)` on a block, auto-vectorised.
fn forward_block_auto(x: &[f32], y: &mut [f32], tanh: bool) {
    if tanh {
        y.iter_mut().zip(x).for_each(|(y, &v)| *y = gelu_tanh(v));
    } else {
        y.iter_mut().zip(x).for_each(|(y, &v)| *y = gelu_erf(v));
    }
}
}

simd_kernel! {
/// `dx = g * gelu'(x)` on a block, auto-vectorised.
fn backward_block_auto(x: &[f32], g: &[f32], dx: &mut [f32], tanh: bool) {
    let it = dx.iter_mut().zip(x).zip(g);
    if tanh {
        it.for_each(|((d, &v), &g)| *d = g * gelu_tanh_grad(v));
    } else {
        it.for_each(|((d, &v), &g)| *d = g * gelu_erf_grad(v));
    }
}
}

// GELU eight lanes at a time with FMAs: the same formulas as the scalar functions above,
// on `fastmath_avx2`'s erf and tanh; the last `len % 8` values take the scalar ones.

/// `sqrt(2/pi) * (x + 0.044715 x^3)`, tanh-GELU's argument.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tanh_arg(x: __m256) -> __m256 {
    let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(0.044715));
    _mm256_mul_ps(_mm256_fmadd_ps(x3, x, x), _mm256_set1_ps(SQRT_2_OVER_PI))
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_value(x: __m256, tanh: bool) -> __m256 {
    let half_x = _mm256_mul_ps(x, _mm256_set1_ps(0.5));
    let f = if tanh {
        tanh8(avx2_tanh_arg(x))
    } else {
        erf_and_gauss8(_mm256_mul_ps(x, _mm256_set1_ps(INV_SQRT_2))).0
    };
    _mm256_fmadd_ps(half_x, f, half_x)
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_slope(x: __m256, tanh: bool) -> __m256 {
    let half = _mm256_set1_ps(0.5);
    if tanh {
        let t = tanh8(avx2_tanh_arg(x));
        let du = _mm256_mul_ps(
            _mm256_fmadd_ps(
                _mm256_mul_ps(x, x),
                _mm256_set1_ps(3.0 * 0.044715),
                _mm256_set1_ps(1.0),
            ),
            _mm256_set1_ps(SQRT_2_OVER_PI),
        );
        let one_minus_t2 = _mm256_fnmadd_ps(t, t, _mm256_set1_ps(1.0));
        let tail = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), one_minus_t2), du);
        _mm256_add_ps(_mm256_fmadd_ps(half, t, half), tail)
    } else {
        let (erf, gauss) = erf_and_gauss8(_mm256_mul_ps(x, _mm256_set1_ps(INV_SQRT_2)));
        let phi = _mm256_mul_ps(_mm256_mul_ps(x, gauss), _mm256_set1_ps(INV_SQRT_2PI));
        _mm256_add_ps(_mm256_fmadd_ps(half, erf, half), phi)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn forward_avx2(x: &[f32], y: &mut [f32], tanh: bool) {
    assert_eq!(x.len(), y.len());
    let full = x.len() / 8 * 8;
    for i in (0..full).step_by(8) {
        let v = _mm256_loadu_ps(x.as_ptr().add(i));
        _mm256_storeu_ps(y.as_mut_ptr().add(i), avx2_value(v, tanh));
    }
    for i in full..x.len() {
        y[i] = if tanh {
            gelu_tanh(x[i])
        } else {
            gelu_erf(x[i])
        };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn backward_avx2(x: &[f32], g: &[f32], dx: &mut [f32], tanh: bool) {
    assert!(x.len() == g.len() && x.len() == dx.len());
    let full = x.len() / 8 * 8;
    for i in (0..full).step_by(8) {
        let v = _mm256_loadu_ps(x.as_ptr().add(i));
        let gv = _mm256_loadu_ps(g.as_ptr().add(i));
        _mm256_storeu_ps(
            dx.as_mut_ptr().add(i),
            _mm256_mul_ps(gv, avx2_slope(v, tanh)),
        );
    }
    for i in full..x.len() {
        let d = if tanh {
            gelu_tanh_grad(x[i])
        } else {
            gelu_erf_grad(x[i])
        };
        dx[i] = g[i] * d;
    }
}

// The same sixteen lanes at a time on `fastmath_avx512`; the last `len % 16` values take
// the eight-lane path.

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tanh_arg(x: __m512) -> __m512 {
    let x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(0.044715));
    _mm512_mul_ps(_mm512_fmadd_ps(x3, x, x), _mm512_set1_ps(SQRT_2_OVER_PI))
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_value(x: __m512, tanh: bool) -> __m512 {
    let half_x = _mm512_mul_ps(x, _mm512_set1_ps(0.5));
    let f = if tanh {
        tanh16(avx512_tanh_arg(x))
    } else {
        erf_and_gauss16(_mm512_mul_ps(x, _mm512_set1_ps(INV_SQRT_2))).0
    };
    _mm512_fmadd_ps(half_x, f, half_x)
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_slope(x: __m512, tanh: bool) -> __m512 {
    let (half, one) = (_mm512_set1_ps(0.5), _mm512_set1_ps(1.0));
    if tanh {
        let t = tanh16(avx512_tanh_arg(x));
        let du = _mm512_set1_ps(3.0 * 0.044715);
        let du = _mm512_mul_ps(
            _mm512_fmadd_ps(_mm512_mul_ps(x, x), du, one),
            _mm512_set1_ps(SQRT_2_OVER_PI),
        );
        let one_minus_t2 = _mm512_fnmadd_ps(t, t, one);
        let tail = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), one_minus_t2), du);
        _mm512_add_ps(_mm512_fmadd_ps(half, t, half), tail)
    } else {
        let (erf, gauss) = erf_and_gauss16(_mm512_mul_ps(x, _mm512_set1_ps(INV_SQRT_2)));
        let phi = _mm512_mul_ps(_mm512_mul_ps(x, gauss), _mm512_set1_ps(INV_SQRT_2PI));
        _mm512_add_ps(_mm512_fmadd_ps(half, erf, half), phi)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn forward_avx512(x: &[f32], y: &mut [f32], tanh: bool) {
    assert_eq!(x.len(), y.len());
    let full = x.len() / 16 * 16;
    for i in (0..full).step_by(16) {
        let v = _mm512_loadu_ps(x.as_ptr().add(i));
        _mm512_storeu_ps(y.as_mut_ptr().add(i), avx512_value(v, tanh));
    }
    forward_avx2(&x[full..], &mut y[full..], tanh);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn backward_avx512(x: &[f32], g: &[f32], dx: &mut [f32], tanh: bool) {
    assert!(x.len() == g.len() && x.len() == dx.len());
    let full = x.len() / 16 * 16;
    for i in (0..full).step_by(16) {
        let v = _mm512_loadu_ps(x.as_ptr().add(i));
        let gv = _mm512_loadu_ps(g.as_ptr().add(i));
        let d = _mm512_mul_ps(gv, avx512_slope(v, tanh));
        _mm512_storeu_ps(dx.as_mut_ptr().add(i), d);
    }
    backward_avx2(&x[full..], &g[full..], &mut dx[full..], tanh);
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
