//! Branch-free f32 math that the compiler can vectorise: the fused kernels call these in
//! plain loops over slices, where libm's scalar `expf`/`erff` would cost ~10 ns a value.

/// `e^x` to about 2 ulp for x in [-87, 88]; x is clamped to that range (no inf, no
/// denormals).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // Cephes' split of ln 2: n * LN2_HI is exact for the n that occur.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a branch.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO; // |r| <= ln2 / 2
                                         // Taylor to degree 6: error < 2e-7 relative on |r| <= 0.347.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // 2^n built in the exponent field. n + 127 is an integer in [1, 254]; adding 2^23
    // puts it in the low mantissa bits, read back with integer ops (a float-to-int cast
    // would saturate and stop the loop from vectorising).
    let biased = (n + 127.0 + 8_388_608.0)
        .to_bits()
        .wrapping_sub(0x4B00_0000);
    p * f32::from_bits(biased << 23)
}

/// `erf(x)` (Abramowitz & Stegun 7.1.26, absolute error < 1.5e-7) and `e^(-x^2)`, which
/// GELU's derivative needs too and gets for free.
#[inline(always)]
pub fn erf_and_gauss(x: f32) -> (f32, f32) {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152,
        1.061_405_4,
    ];
    let ax = x.abs();
    let t = 1.0 / (1.0 + P * ax);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let g = exp(-x * x);
    let e = 1.0 - poly * g;
    (e.copysign(x), g)
}

/// `tanh(x)` from one exponential: `1 - 2 / (e^(2x) + 1)`, saturating cleanly at +/-1.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// Sum of a slice in 16 independent lanes (vectorisable; the order differs from a serial
/// sum by rounding only).
#[inline(always)]
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + rest.iter().sum::<f32>()
}

/// `sum(e^(x - shift))` in 16 lanes: the exponentials and the sum vectorise together (a
/// serial `map(exp).sum()` keeps the adds in order and runs one value at a time).
#[inline(always)]
pub fn sum_exp(x: &[f32], shift: f32) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] += exp(c[i] - shift);
        }
    }
    acc.iter().sum::<f32>() + rest.iter().map(|&v| exp(v - shift)).sum::<f32>()
}

/// Dot product of two equal-length slices in 16 lanes.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let rest: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + rest
}

/// Largest element (-inf for an empty slice).
#[inline(always)]
pub fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] = acc[i].max(c[i]);
        }
    }
    acc.iter()
        .chain(rest)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_a_few_ulp_of_libm() {
        let mut worst = 0f32;
        for i in -86_900..88_000 {
            let x = i as f32 * 1e-3;
            let (a, b) = (exp(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(exp(-200.0), exp(-87.0));
        assert!(exp(100.0).is_finite());
    }

    #[test]
    fn fast_erf_and_tanh_are_within_5e7_of_libm() {
        let mut worst = (0f64, 0f64, 0f64);
        for i in -8000..8000 {
            let x = i as f32 * 1e-3;
            let (e, g) = erf_and_gauss(x);
            let xd = x as f64;
            worst.0 = worst
                .0
                .max((e as f64 - candle_core::cpu::erf::erf_f64(xd)).abs());
            worst.1 = worst.1.max((g as f64 - (-xd * xd).exp()).abs());
            worst.2 = worst.2.max((tanh(x) as f64 - xd.tanh()).abs());
        }
        assert!(
            worst.0 < 5e-7 && worst.1 < 5e-7 && worst.2 < 5e-7,
            "{worst:?}"
        );
    }

    #[test]
    fn lane_reductions_match_serial_ones() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let y: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        assert!((sum(&x) - x.iter().sum::<f32>()).abs() < 1e-5);
        let d: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert!((dot(&x, &y) - d).abs() < 1e-5);
        assert_eq!(max(&x), x.iter().copied().fold(f32::MIN, f32::max));
        assert_eq!(max(&[]), f32::NEG_INFINITY);
    }
}
