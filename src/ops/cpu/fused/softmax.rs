//! Causal softmax over the last dimension of square `(.., T, T)` scores: row i keeps
//! columns j <= i. The backward uses the saved output. (Attention without dropout uses
//! the fused `causal_attention` instead, which includes this.)

use super::storage::{for_row_blocks, slice_of, with_f32};
use crate::ops::cpu::fastmath;
use crate::ops::cpu::simd::simd_kernel;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

struct CausalSoftmax;

/// Row `i` of scores becomes the softmax of `row[..=i] * scale` (scale > 0), zeros after:
/// by hand at AVX2 and AVX-512 ([`causal_softmax_row_avx2`], [`causal_softmax_row_avx512`]),
/// auto-vectorised otherwise.
pub(super) fn causal_softmax_row(row: &mut [f32], i: usize, scale: f32) {
    #[cfg(target_arch = "x86_64")]
    match crate::ops::cpu::simd::level() {
        // SAFETY: the level is AVX2 only where the CPU has AVX2 and FMA.
        crate::ops::cpu::simd::SimdLevel::Avx2 => {
            return unsafe { causal_softmax_row_avx2(row, i, scale) }
        }
        // SAFETY: the level is AVX-512 only where the CPU has AVX-512 F (and more).
        crate::ops::cpu::simd::SimdLevel::Avx512 => {
            return unsafe { causal_softmax_row_avx512(row, i, scale) }
        }
        crate::ops::cpu::simd::SimdLevel::Scalar => {}
    }
    causal_softmax_row_auto(row, i, scale)
}

/// [`causal_softmax_row`] with `fastmath_avx512`'s exponential, sixteen lanes at a time,
/// the last 1-15 live values under a mask (the auto-vectorised exponential cannot use
/// FMAs: see `fastmath_avx512`; on a 2-core Intel Xeon the softmax was 5% of mini's step).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn causal_softmax_row_avx512(row: &mut [f32], i: usize, scale: f32) {
    use crate::ops::cpu::fastmath_avx512::exp16;
    use std::arch::x86_64::*;
    let (live, masked) = row.split_at_mut(i + 1);
    let max = fastmath::max(live) * scale;
    let (vscale, vmax) = (_mm512_set1_ps(scale), _mm512_set1_ps(max));
    let mut acc = _mm512_setzero_ps();
    for chunk in live.chunks_mut(16) {
        let keep: __mmask16 = if chunk.len() == 16 {
            u16::MAX
        } else {
            (1u16 << chunk.len()) - 1
        };
        let p = chunk.as_mut_ptr();
        let x = _mm512_maskz_loadu_ps(keep, p);
        let e = _mm512_maskz_mov_ps(keep, exp16(_mm512_fmsub_ps(x, vscale, vmax)));
        _mm512_mask_storeu_ps(p, keep, e);
        acc = _mm512_add_ps(acc, e);
    }
    let inv = 1.0 / _mm512_reduce_add_ps(acc);
    live.iter_mut().for_each(|v| *v *= inv);
    masked.iter_mut().for_each(|v| *v = 0.0);
}

/// [`causal_softmax_row`] with `fastmath_avx2`'s exponential, eight lanes at a time (the
/// auto-vectorised one runs at half speed on AVX2: see `fastmath_avx2`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn causal_softmax_row_avx2(row: &mut [f32], i: usize, scale: f32) {
    use crate::ops::cpu::fastmath_avx2::exp8;
    use std::arch::x86_64::*;
    let max = fastmath::max(&row[..=i]) * scale;
    let full = (i + 1) / 8 * 8;
    let tail = i + 1 - full;
    let (vscale, vmax) = (_mm256_set1_ps(scale), _mm256_set1_ps(max));
    let mut acc = _mm256_setzero_ps();
    for at in (0..full).step_by(8) {
        let p = row.as_mut_ptr().add(at);
        let e = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(p), vscale, vmax));
        _mm256_storeu_ps(p, e);
        acc = _mm256_add_ps(acc, e);
    }
    let mut total = 0.0;
    if tail > 0 && full + 8 <= row.len() {
        // The last 1-7 live values as one vector that runs into the masked part (rows
        // are short: a scalar tail was a quarter of the work); the lanes past `i` become
        // zeros, which the masked part is anyway.
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail as i32), lane);
        let p = row.as_mut_ptr().add(full);
        let e = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(p), vscale, vmax));
        let e = _mm256_and_ps(e, _mm256_castsi256_ps(keep));
        _mm256_storeu_ps(p, e);
        acc = _mm256_add_ps(acc, e);
    } else {
        for v in &mut row[full..=i] {
            *v = fastmath::exp(*v * scale - max);
            total += *v;
        }
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    let inv = 1.0 / (fastmath::sum(&lanes) + total);
    let (live, masked) = row.split_at_mut(i + 1);
    live.iter_mut().for_each(|v| *v *= inv);
    masked.iter_mut().for_each(|v| *v = 0.0);
}

simd_kernel! {
/// [`causal_softmax_row`], auto-vectorised.
fn causal_softmax_row_auto(row: &mut [f32], i: usize, scale: f32) {
    let (live, masked) = row.split_at_mut(i + 1);
    let max = fastmath::max(live) * scale;
    live.iter_mut()
        .for_each(|v| *v = fastmath::exp(*v * scale - max));
    let inv = 1.0 / fastmath::sum(live);
    live.iter_mut().for_each(|v| *v *= inv);
    masked.iter_mut().for_each(|v| *v = 0.0);
}
}

simd_kernel! {
/// `dx = y * (dy - <y, dy>) * scale` on one row (zeros where y is).
pub(super) fn softmax_grad_row(y: &[f32], dy: &[f32], scale: f32, dx: &mut [f32]) {
    let dot = fastmath::dot(y, dy);
    for ((d, &y), &g) in dx.iter_mut().zip(y).zip(dy) {
        *d = y * (g - dot) * scale;
    }
}
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "fused-causal-softmax"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s, l)?;
        let t = *l.dims().last().expect("rank >= 1");
        let mut out = x.to_vec();
        for_row_blocks(&mut out, t, |first, o| {
            for (r, o) in o.chunks_exact_mut(t).enumerate() {
                causal_softmax_row(o, (first + r) % t, 1.0);
            }
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let t = res.dim(candle_core::D::Minus1)?;
        let dx = with_f32(res, |y| {
            with_f32(grad, |dy| {
                let mut dx = vec![0f32; y.len()];
                for_row_blocks(&mut dx, t, |first, d| {
                    for (r, d) in d.chunks_exact_mut(t).enumerate() {
                        let at = (first + r) * t;
                        softmax_grad_row(&y[at..at + t], &dy[at..at + t], 1.0, d);
                    }
                });
                dx
            })
        })??;
        Ok(Some(Tensor::from_vec(dx, res.shape(), res.device())?))
    }
}

pub fn causal_softmax(scores: &Tensor) -> Result<Tensor> {
    scores.contiguous()?.apply_op1(CausalSoftmax)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row length from 1 to 70 (whole vectors and every tail), at every SIMD level
    /// this CPU has: the softmax of `row[..=i] * scale` to within float rounding of an
    /// f64 reference, zeros after `i`.
    #[test]
    fn causal_softmax_rows_match_an_f64_softmax_at_every_simd_level() {
        let t = 70;
        let scale = 0.3;
        let scores: Vec<f32> = (0..t)
            .map(|j| ((j * 37 % 23) as f32 - 11.0) * 0.7)
            .collect();
        let check = |row: &[f32], i: usize, level: &str| {
            let max = scores[..=i].iter().fold(f64::MIN, |m, &v| m.max(v as f64)) * scale;
            let e: Vec<f64> = scores[..=i]
                .iter()
                .map(|&v| (v as f64 * scale - max).exp())
                .collect();
            let total: f64 = e.iter().sum();
            for j in 0..t {
                let want = if j <= i { e[j] / total } else { 0.0 };
                let got = row[j] as f64;
                assert!(
                    (got - want).abs() <= 2e-6 * want.max(1e-3),
                    "{level}: row {i} column {j}: {got} vs {want}"
                );
            }
        };
        for i in 0..t {
            let mut row = scores.clone();
            causal_softmax_row_auto(&mut row, i, scale as f32);
            check(&row, i, "auto");
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    let mut row = scores.clone();
                    // SAFETY: AVX2 and FMA were detected.
                    unsafe { causal_softmax_row_avx2(&mut row, i, scale as f32) };
                    check(&row, i, "avx2");
                }
                if is_x86_feature_detected!("avx512f") {
                    let mut row = scores.clone();
                    // SAFETY: AVX-512 F was detected.
                    unsafe { causal_softmax_row_avx512(&mut row, i, scale as f32) };
                    check(&row, i, "avx512");
                }
            }
        }
    }
}
