//! gemm's drivers at a chosen SIMD level: the crate's own dispatch at the CPU's level,
//! its generic driver with a lower level's micro-kernels below it (`TP_SIMD`).

use crate::ops::cpu::simd::{self, SimdLevel};

/// `dst (+)= lhs @ rhs` on `threads` threads with gemm's kernels for `level`: at the detected level the gemm
/// crate's own dispatch (AVX-512 kernels where the CPU has them: feature `x86-v4`); below
/// it, the same driver with the lower level's micro-kernels, which gemm does not let a
/// caller choose.
///
/// # Safety
/// As `gemm::gemm`: the pointers and strides describe valid, non-overlapping (dst)
/// matrices, with non-negative strides.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_at_level(
    threads: usize,
    level: SimdLevel,
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_cs: isize,
    dst_rs: isize,
    read_dst: bool,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
) {
    if level == simd::detected() {
        return gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs,
            dst_rs,
            read_dst,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism(threads),
        );
    }
    gemm_below_detected(
        threads, level, m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs,
        rhs_rs,
    )
}

/// [`gemm_at_level`] at a level below the CPU's: gemm-common's generic driver with
/// gemm-f32's micro-kernels of that level.
///
/// # Safety
/// As [`gemm_at_level`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_below_detected(
    threads: usize,
    level: SimdLevel,
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_cs: isize,
    dst_rs: isize,
    read_dst: bool,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
) {
    // gemm's own normalisation: its micro-kernels want a column-oriented destination, so
    // a row-oriented product is computed as its transpose.
    let (m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs) =
        if dst_cs.abs() < dst_rs.abs() {
            (
                n, m, dst_rs, dst_cs, rhs, rhs_rs, rhs_cs, lhs, lhs_rs, lhs_cs,
            )
        } else {
            (
                m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs,
            )
        };
    macro_rules! with_kernels {
        ($simd:expr, $module:ident, $n:expr) => {{
            use gemm_f32::microkernel::$module::f32::{H_M, H_N, H_UKR, MR_DIV_N, NR, UKR};
            gemm_common::gemm::gemm_basic_generic::<
                _,
                f32,
                { $n },
                { MR_DIV_N * $n },
                NR,
                MR_DIV_N,
                H_M,
                H_N,
            >(
                $simd,
                m,
                n,
                k,
                dst,
                dst_cs,
                dst_rs,
                read_dst,
                lhs,
                lhs_cs,
                lhs_rs,
                rhs,
                rhs_cs,
                rhs_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                |a, b, c| a * b + c,
                &UKR,
                &H_UKR,
                false,
                parallelism(threads),
            )
        }};
    }
    use gemm_common::simd::MixedSimd;
    match level {
        SimdLevel::Avx2 | SimdLevel::Avx512 => {
            let simd = <gemm_common::simd::V3 as MixedSimd<f32, f32, f32, f32>>::try_new()
                .expect("AVX2 + FMA: below the detected level");
            with_kernels!(simd, fma, 8)
        }
        SimdLevel::Scalar => with_kernels!(gemm_common::simd::Scalar, scalar, 1),
    }
}

/// gemm's own threading over `threads` threads of the current rayon pool, or none.
fn parallelism(threads: usize) -> gemm::Parallelism {
    if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::cpu::gemm::tests::{assert_strided_equals, naive};

    /// Every level this CPU runs (the forced lower ones included) computes the same
    /// products, on shapes that exercise the micro-kernels' edges and both orientations.
    #[test]
    fn every_simd_level_up_to_the_detected_one_matches_a_naive_matmul() {
        for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
            if level > simd::detected() {
                continue;
            }
            for (m, k, n) in [(1, 1, 1), (37, 19, 53), (64, 128, 48), (3, 300, 2)] {
                let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
                let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
                let want = naive(&a, &b, m, k, n);
                for (rows_major, accumulate) in [(true, false), (false, true)] {
                    let mut c = vec![if accumulate { 1.0f32 } else { f32::NAN }; m * n];
                    let (cs, rs) = if rows_major { (1, n) } else { (m, 1) };
                    // SAFETY: the buffers hold exactly these matrices.
                    unsafe {
                        gemm_at_level(
                            1,
                            level,
                            m,
                            n,
                            k,
                            c.as_mut_ptr(),
                            cs as isize,
                            rs as isize,
                            accumulate,
                            a.as_ptr(),
                            1,
                            k as isize,
                            b.as_ptr(),
                            1,
                            n as isize,
                        )
                    };
                    let plus = if accumulate { 1.0 } else { 0.0 };
                    let case = format!("{level:?} {m}x{k}x{n} row-major={rows_major}");
                    assert_strided_equals(&c, (rs, cs), &want, n, plus, &case);
                }
            }
        }
    }
}
