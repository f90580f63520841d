//! What one core of this machine can do, measured rather than assumed: the f32 FMA
//! throughput at a SIMD level (twelve independent chains of fused multiply-adds on
//! registers, enough to cover the FMA latency on every x86 core in use, timed at their
//! best of several runs), and the CPU's model name. The bench reports its matmul rates
//! against this peak, so a figure says how close it comes to the machine, not to our
//! own kernel.

use super::simd::SimdLevel;

const CHAINS: usize = 12;

/// Best-of-five single-core f32 FMA throughput at `level`, in GFLOP/s (2 FLOPs per lane
/// per FMA). `level` must not exceed [`super::simd::detected`].
pub fn fma_peak_gflops(level: SimdLevel) -> f64 {
    let (iters, lanes) = (2_000_000usize, level.f32_lanes());
    let mut best = f64::INFINITY;
    let mut sink = 0f32;
    for _ in 0..5 {
        let t0 = std::time::Instant::now();
        sink += match level {
            // SAFETY: the caller's level is at most the detected one, so these features
            // are present.
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => unsafe { fma_chains_avx512(iters) },
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => unsafe { fma_chains_avx2(iters) },
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Scalar => unsafe { mul_add_chains_sse2(iters) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => 0.0,
        };
        best = best.min(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    (iters * CHAINS * lanes * 2) as f64 / best / 1e9
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_avx512(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); CHAINS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    acc.iter().map(|&x| _mm512_reduce_add_ps(x)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains_avx2(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); CHAINS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut lanes = [0f32; 8];
    acc.iter()
        .map(|&x| {
            _mm256_storeu_ps(lanes.as_mut_ptr(), x);
            lanes.iter().sum::<f32>()
        })
        .sum()
}

/// Plain x86-64 has no FMA instruction: a multiply and an add (SSE2, 4 lanes), the same
/// 2 FLOPs per lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
unsafe fn mul_add_chains_sse2(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm_set1_ps(0.999_999), _mm_set1_ps(1e-7));
    let mut acc = [_mm_set1_ps(1.0); CHAINS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm_add_ps(_mm_mul_ps(*x, a), b);
        }
    }
    let mut lanes = [0f32; 4];
    acc.iter()
        .map(|&x| {
            _mm_storeu_ps(lanes.as_mut_ptr(), x);
            lanes.iter().sum::<f32>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fma_peak_is_measured() {
        let best = super::super::simd::detected();
        let at_best = fma_peak_gflops(best);
        assert!(at_best.is_finite() && at_best > 0.1, "{at_best}");
    }
}
