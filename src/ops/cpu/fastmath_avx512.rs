//! `fastmath`'s exponential, erf and tanh sixteen lanes at a time with AVX-512 intrinsics:
//! `fastmath_avx2`'s formulas, one register twice as wide.
//!
//! Why by hand at this level too: the auto-vectorised polynomials of `fastmath` cannot
//! use FMAs (Rust never fuses `a * b + c` on its own: it would change the rounding), so
//! at AVX-512 they ran at about 4 ns an element for GELU's forward and backward on an
//! Intel Xeon (issue 39), where these run the same formulas with FMAs and results that
//! differ from `fastmath`'s by rounding only.
//!
//! Every function here needs AVX-512 F; callers check `simd::level()` first.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// `e^x` for sixteen lanes (`fastmath::exp`'s range reduction and polynomial).
///
/// # Safety
/// The CPU must have AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn exp16(x: __m512) -> __m512 {
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(-87.0)),
        _mm512_set1_ps(88.0),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(p, _mm512_castsi512_ps(bits))
}

/// `erf(x)` and `e^(-x^2)` for sixteen lanes (`fastmath::erf_and_gauss`).
///
/// # Safety
/// The CPU must have AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn erf_and_gauss16(x: __m512) -> (__m512, __m512) {
    let sign = _mm512_set1_epi32(i32::MIN);
    let xi = _mm512_castps_si512(x);
    let ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, xi));
    let one = _mm512_set1_ps(1.0);
    let t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.327_591_1), ax, one));
    let mut p = _mm512_set1_ps(1.061_405_4);
    for c in [-1.453_152, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
    }
    let poly = _mm512_mul_ps(p, t);
    let minus_x2 = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_mul_ps(x, x)),
        sign,
    ));
    let g = exp16(minus_x2);
    let e = _mm512_fnmadd_ps(poly, g, one);
    let signed = _mm512_or_si512(_mm512_castps_si512(e), _mm512_and_si512(xi, sign));
    (_mm512_castsi512_ps(signed), g)
}

/// `tanh(x)` for sixteen lanes: `1 - 2 / (e^(2x) + 1)` (`fastmath::tanh`).
///
/// # Safety
/// The CPU must have AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn tanh16(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let e = exp16(_mm512_add_ps(x, x));
    _mm512_sub_ps(
        one,
        _mm512_div_ps(_mm512_set1_ps(2.0), _mm512_add_ps(e, one)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::cpu::fastmath;

    fn lanes(f: impl Fn(__m512) -> __m512, x: [f32; 16]) -> [f32; 16] {
        let mut out = [0f32; 16];
        // SAFETY: the caller's test returns early unless the CPU has AVX-512 F.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), f(_mm512_loadu_ps(x.as_ptr()))) };
        out
    }

    #[test]
    fn sixteen_lane_exp_erf_and_tanh_agree_with_fastmath_to_rounding() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let xs: Vec<f32> = (-4000..=4003).map(|i| i as f32 * 0.0025).collect();
        for chunk in xs.chunks_exact(16) {
            let x: [f32; 16] = chunk.try_into().unwrap();
            // SAFETY: AVX-512 F was detected above.
            let e = lanes(|v| unsafe { exp16(v) }, x);
            let erf = lanes(|v| unsafe { erf_and_gauss16(v).0 }, x);
            let gauss = lanes(|v| unsafe { erf_and_gauss16(v).1 }, x);
            let t = lanes(|v| unsafe { tanh16(v) }, x);
            for i in 0..16 {
                let want = fastmath::exp(x[i]);
                assert!((e[i] - want).abs() <= 4e-7 * want, "exp({})", x[i]);
                let (we, wg) = fastmath::erf_and_gauss(x[i]);
                assert!((erf[i] - we).abs() < 5e-7, "erf({})", x[i]);
                assert!((gauss[i] - wg).abs() < 5e-7, "gauss({})", x[i]);
                assert!((t[i] - fastmath::tanh(x[i])).abs() < 5e-7, "tanh({})", x[i]);
            }
        }
        let mut ends = [0f32; 16];
        ends[..8].copy_from_slice(&[200.0, -200.0, 88.0, -87.0, 0.0, 1.0, -1.0, 10.0]);
        let big = lanes(|v| unsafe { exp16(v) }, ends);
        assert!(big
            .iter()
            .all(|v| v.is_finite() && (*v == 0.0 || v.is_normal())));
    }
}
