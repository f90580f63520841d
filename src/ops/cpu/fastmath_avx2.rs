//! `fastmath`'s exponential and erf eight lanes at a time with AVX2 + FMA intrinsics.
//!
//! Why by hand: Rust never fuses `a * b + c` into an FMA on its own (it would change the
//! rounding), and AVX2 has 16 vector registers where AVX-512 has 32, so the
//! auto-vectorised polynomials of `fastmath` spill their constants and run at half the
//! AVX-512 speed per element on a core with the same FMA throughput. The formulas are
//! `fastmath`'s, evaluated with FMAs: the results differ from it by rounding only.
//!
//! Every function here needs AVX2 and FMA; callers check `simd::level()` first.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// `e^x` for eight lanes (`fastmath::exp`'s range reduction and polynomial).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn exp8(x: __m256) -> __m256 {
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
        _mm256_set1_ps(88.0),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(bits))
}

/// `erf(x)` and `e^(-x^2)` for eight lanes (`fastmath::erf_and_gauss`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn erf_and_gauss8(x: __m256) -> (__m256, __m256) {
    let sign = _mm256_set1_ps(-0.0);
    let ax = _mm256_andnot_ps(sign, x);
    let one = _mm256_set1_ps(1.0);
    let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.327_591_1), ax, one));
    let mut p = _mm256_set1_ps(1.061_405_4);
    for c in [-1.453_152, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
    }
    let poly = _mm256_mul_ps(p, t);
    let g = exp8(_mm256_xor_ps(_mm256_mul_ps(x, x), sign));
    let e = _mm256_fnmadd_ps(poly, g, one);
    (_mm256_or_ps(e, _mm256_and_ps(x, sign)), g)
}

/// `tanh(x)` for eight lanes: `1 - 2 / (e^(2x) + 1)` (`fastmath::tanh`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tanh8(x: __m256) -> __m256 {
    let one = _mm256_set1_ps(1.0);
    let e = exp8(_mm256_add_ps(x, x));
    _mm256_sub_ps(
        one,
        _mm256_div_ps(_mm256_set1_ps(2.0), _mm256_add_ps(e, one)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::cpu::fastmath;

    fn lanes(f: impl Fn(__m256) -> __m256, x: [f32; 8]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: the caller's test returns early unless the CPU has AVX2 and FMA.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), f(_mm256_loadu_ps(x.as_ptr()))) };
        out
    }

    #[test]
    fn eight_lane_exp_erf_and_tanh_agree_with_fastmath_to_rounding() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.0025).collect();
        for chunk in xs.chunks_exact(8) {
            let x: [f32; 8] = chunk.try_into().unwrap();
            // SAFETY: AVX2 and FMA were detected above.
            let e = lanes(|v| unsafe { exp8(v) }, x);
            let erf = lanes(|v| unsafe { erf_and_gauss8(v).0 }, x);
            let gauss = lanes(|v| unsafe { erf_and_gauss8(v).1 }, x);
            let t = lanes(|v| unsafe { tanh8(v) }, x);
            for i in 0..8 {
                let want = fastmath::exp(x[i]);
                assert!((e[i] - want).abs() <= 4e-7 * want, "exp({})", x[i]);
                let (we, wg) = fastmath::erf_and_gauss(x[i]);
                assert!((erf[i] - we).abs() < 5e-7, "erf({})", x[i]);
                assert!((gauss[i] - wg).abs() < 5e-7, "gauss({})", x[i]);
                assert!((t[i] - fastmath::tanh(x[i])).abs() < 5e-7, "tanh({})", x[i]);
            }
        }
        // The clamps hold at the ends: no inf, no NaN, no denormals.
        let big = lanes(
            |v| unsafe { exp8(v) },
            [200.0, -200.0, 88.0, -87.0, 0.0, 1.0, -1.0, 10.0],
        );
        assert!(big
            .iter()
            .all(|v| v.is_finite() && (*v == 0.0 || v.is_normal())));
    }
}
