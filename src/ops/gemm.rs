//! Safe strided matrix views over f32 slices and `dst (+)= a @ b` on them with the `gemm`
//! crate (candle's own CPU matmul). Strides let a kernel multiply by a transpose, or by
//! one head's columns of a packed QKV buffer, without copying it first.

use rayon::prelude::*;

/// Element (i, j) of a view is `data[i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `(rows, cols)` matrix starting at `data[0]`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// `(rows, cols)` with row stride `rs` and unit column stride, starting at `data[0]`.
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        let m = Self {
            data,
            rows,
            cols,
            rs,
            cs,
        };
        assert!(m.fits(data.len()), "matrix view out of bounds");
        m
    }

    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows `r0..r1` and columns `c0..c1` of this view.
    pub fn block(self, r0: usize, r1: usize, c0: usize, c1: usize) -> Self {
        assert!(r0 <= r1 && r1 <= self.rows && c0 <= c1 && c1 <= self.cols);
        let at = if r1 > r0 && c1 > c0 {
            r0 * self.rs + c0 * self.cs
        } else {
            0
        };
        Self::strided(&self.data[at..], r1 - r0, c1 - c0, self.rs, self.cs)
    }

    fn fits(&self, len: usize) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < len
    }
}

/// A mutable view, as [`Mat`].
#[derive(Debug)]
pub struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> MatMut<'a> {
    pub fn rows(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    pub fn strided(data: &'a mut [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        let fits = rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < data.len();
        assert!(fits, "matrix view out of bounds");
        Self {
            data,
            rows,
            cols,
            rs,
            cs,
        }
    }
}

/// `dst = a @ b`, or `dst += a @ b` when `accumulate`, on `threads` threads of the current
/// rayon pool (1: the calling thread only).
pub fn matmul(dst: MatMut, a: Mat, b: Mat, accumulate: bool, threads: usize) {
    // Different strides of one buffer must not make two output elements alias.
    assert!(dst.rows <= 1 || dst.cols <= 1 || (dst.rs != 0 && dst.cs != 0 && dst.rs != dst.cs));
    let out = Out {
        ptr: dst.data.as_mut_ptr(),
        rows: dst.rows,
        cols: dst.cols,
        rs: dst.rs,
        cs: dst.cs,
    };
    // SAFETY: `dst` was bounds-checked when it was made and is borrowed mutably, so it
    // overlaps neither input; its elements do not alias (asserted above).
    unsafe { matmul_out(out, a, b, accumulate, threads) }
}

/// `a @ b` as a new row-major `(a.rows, b.cols)` buffer. Unlike `matmul` onto a zeroed
/// vector it never writes the output twice: zero-filling the outputs of a step's
/// matmuls was ~4% of a mini step.
pub fn matmul_new(a: Mat, b: Mat, threads: usize) -> Vec<f32> {
    let (rows, cols) = (a.rows, b.cols);
    let mut v: Vec<f32> = Vec::with_capacity(rows * cols);
    let out = Out {
        ptr: v.spare_capacity_mut().as_mut_ptr().cast::<f32>(),
        rows,
        cols,
        rs: cols,
        cs: 1,
    };
    // SAFETY: the capacity holds exactly `rows * cols` elements, row-major, owned here;
    // without `accumulate` every element is written and none is read first (gemm's
    // contract for `read_dst = false`, and the `k = 0` branch's zero fill).
    unsafe {
        matmul_out(out, a, b, false, threads);
        v.set_len(rows * cols);
    }
    v
}

/// A destination by pointer: `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

// SAFETY: an `Out` is only sent to the threads of `matmul_split_rows`, each of which
// writes a disjoint block of rows.
unsafe impl Send for Out {}

/// # Safety
/// `dst` describes writable memory valid for every element of its shape, disjoint from
/// `a` and `b`, with no two elements at one address; when `accumulate` it is initialised.
unsafe fn matmul_out(dst: Out, a: Mat, b: Mat, accumulate: bool, threads: usize) {
    assert_eq!(a.cols, b.rows, "inner dimensions differ");
    assert_eq!(
        (dst.rows, dst.cols),
        (a.rows, b.cols),
        "output shape differs"
    );
    if dst.rows == 0 || dst.cols == 0 {
        return;
    }
    if a.cols == 0 {
        if !accumulate {
            for i in 0..dst.rows {
                for j in 0..dst.cols {
                    dst.ptr.add(i * dst.rs + j * dst.cs).write(0.0);
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() == super::simd::SimdLevel::Avx2
        && dst.cs == 1
        && dst.rs >= dst.cols
        && dst.rows * dst.cols * a.cols <= super::small_gemm_avx2::MAX_WORK
    {
        // SAFETY: AVX2 + FMA is the level in force; the views are valid as above.
        return super::small_gemm_avx2::matmul(
            (dst.rows, dst.cols, a.cols),
            dst.ptr,
            dst.rs,
            accumulate,
            (a.data.as_ptr(), a.rs, a.cs),
            (b.data.as_ptr(), b.rs, b.cs),
        );
    }
    if threads > 1 && dst.cs == 1 && dst.rs >= dst.cols && dst.rows >= 32 * threads {
        return matmul_split_rows(dst, a, b, accumulate, threads);
    }
    // SAFETY: the input views were bounds-checked when they were made, shapes agree
    // (asserted above), the caller vouches for `dst`, and gemm reads exactly the
    // elements the views describe; strides are non-negative (usize).
    gemm_at_level(
        super::simd::level(),
        dst.rows,
        dst.cols,
        a.cols,
        dst.ptr,
        dst.cs as isize,
        dst.rs as isize,
        accumulate,
        a.data.as_ptr(),
        a.cs as isize,
        a.rs as isize,
        b.data.as_ptr(),
        b.cs as isize,
        b.rs as isize,
    )
}

/// `dst (+)= lhs @ rhs` with gemm's kernels for `level`: at the detected level the gemm
/// crate's own dispatch (AVX-512 kernels where the CPU has them: feature `x86-v4`); below
/// it, the same driver with the lower level's micro-kernels, which gemm does not let a
/// caller choose.
///
/// # Safety
/// As `gemm::gemm`: the pointers and strides describe valid, non-overlapping (dst)
/// matrices, with non-negative strides.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_at_level(
    level: super::simd::SimdLevel,
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
    if level == super::simd::detected() {
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
            gemm::Parallelism::None,
        );
    }
    gemm_below_detected(
        level, m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs,
    )
}

/// [`gemm_at_level`] at a level below the CPU's: gemm-common's generic driver with
/// gemm-f32's micro-kernels of that level.
///
/// # Safety
/// As [`gemm_at_level`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_below_detected(
    level: super::simd::SimdLevel,
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
    use super::simd::SimdLevel;
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
                gemm::Parallelism::None,
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

/// Splits the rows of `dst` (row-major, rows apart) into one block per thread, each a
/// single-threaded product on the current rayon pool. On the model's shapes (a few hundred
/// to a few thousand rows, 128-1536 columns) this scales where gemm's own threading,
/// which splits the columns, does not.
///
/// # Safety
/// As [`matmul_out`].
unsafe fn matmul_split_rows(dst: Out, a: Mat, b: Mat, accumulate: bool, threads: usize) {
    let per = dst.rows.div_ceil(threads);
    let blocks: Vec<(usize, Out)> = (0..dst.rows)
        .step_by(per)
        .map(|r0| {
            let rows = per.min(dst.rows - r0);
            // SAFETY: row r0 lies inside `dst`.
            let ptr = unsafe { dst.ptr.add(r0 * dst.rs) };
            (r0, Out { ptr, rows, ..dst })
        })
        .collect();
    blocks.into_par_iter().for_each(|(r0, block)| {
        let sub = Mat {
            data: &a.data[r0 * a.rs..],
            rows: block.rows,
            ..a
        };
        // SAFETY: the blocks are disjoint row ranges of `dst` (rows are `rs >= cols`
        // apart), each written by one thread.
        unsafe { matmul_out(block, sub, b, accumulate, 1) }
    });
}

thread_local! {
    static THREADS: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Threads the fused kernels use from this thread: candle's count (RAYON_NUM_THREADS,
/// else all cores) unless [`with_threads`] says otherwise.
pub fn threads() -> usize {
    THREADS
        .get()
        .unwrap_or_else(candle_core::utils::get_num_threads)
}

/// Runs `f` with the fused kernels called from this thread using `n` threads.
pub fn with_threads<R>(n: usize, f: impl FnOnce() -> R) -> R {
    let before = THREADS.replace(Some(n));
    let r = f();
    THREADS.set(before);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn strided_matmul_matches_a_naive_one_for_plain_transposed_and_accumulated_views() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.3).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.7).cos()).collect();
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![0f32; m * n];
        matmul(
            MatMut::rows(&mut c, m, n),
            Mat::rows(&a, m, k),
            Mat::rows(&b, k, n),
            false,
            1,
        );
        assert!(c.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-5));
        // (b^T)^T from a transposed copy of b, accumulated onto the previous result.
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        matmul(
            MatMut::rows(&mut c, m, n),
            Mat::rows(&a, m, k),
            Mat::rows(&bt, n, k).t(),
            true,
            2,
        );
        assert!(c.iter().zip(&want).all(|(x, y)| (x - 2.0 * y).abs() < 1e-5));
    }

    /// Every level this CPU runs (the forced lower ones included) computes the same
    /// products, on shapes that exercise the micro-kernels' edges and both orientations.
    #[test]
    fn every_simd_level_up_to_the_detected_one_matches_a_naive_matmul() {
        use crate::ops::simd::{detected, SimdLevel};
        for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
            if level > detected() {
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
                    for i in 0..m {
                        for j in 0..n {
                            let got = c[i * rs + j * cs];
                            let expect = want[i * n + j] + if accumulate { 1.0 } else { 0.0 };
                            assert!(
                                (got - expect).abs() <= 1e-4 * (1.0 + expect.abs()),
                                "{level:?} {m}x{k}x{n} row-major={rows_major}: ({i},{j}) {got} vs {expect}"
                            );
                        }
                    }
                }
            }
        }
    }
}
