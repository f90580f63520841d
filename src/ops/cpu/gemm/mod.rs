//! `dst (+)= a @ b` on strided views of f32 slices ([`view`]) with the `gemm` crate
//! (candle's own CPU matmul): at the SIMD level in force ([`level`]), shared between
//! threads by rows or by columns ([`split`]); or with a system BLAS where the run asks
//! for one ([`route`], [`blas`]).

pub mod blas;
mod level;
pub mod route;
mod split;
mod view;

use rayon::prelude::*;
use split::Split;
use view::Out;
pub use view::{Mat, MatMut};

/// `dst = a @ b`, or `dst += a @ b` when `accumulate`, on `threads` threads of the current
/// rayon pool (1: the calling thread only), by the route in force ([`route::current`]).
pub fn matmul(dst: MatMut, a: Mat, b: Mat, accumulate: bool, threads: usize) {
    matmul_on(route::current(), dst, a, b, accumulate, threads)
}

/// [`matmul`] by `route`.
pub fn matmul_on(
    route: route::Matmul,
    dst: MatMut,
    a: Mat,
    b: Mat,
    accumulate: bool,
    threads: usize,
) {
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
    unsafe { matmul_out(blas_of(route), out, a, b, accumulate, threads) }
}

/// The library that computes the products under `route`, if a BLAS. A run checked it
/// loads before it started ([`route::resolve`]); here a missing one is a bug.
fn blas_of(route: route::Matmul) -> Option<&'static blas::Blas> {
    match route {
        route::Matmul::Gemm => None,
        route::Matmul::Blas => Some(blas::library().unwrap_or_else(|e| panic!("{e}"))),
    }
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
        matmul_out(blas_of(route::current()), out, a, b, false, threads);
        v.set_len(rows * cols);
    }
    v
}

/// # Safety
/// `dst` describes writable memory valid for every element of its shape, disjoint from
/// `a` and `b`, with no two elements at one address; when `accumulate` it is initialised.
unsafe fn matmul_out(
    blas: Option<&'static blas::Blas>,
    dst: Out,
    a: Mat,
    b: Mat,
    accumulate: bool,
    threads: usize,
) {
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
    // The small-product kernel belongs to the gemm route: under `matmul: blas` the
    // library computes every product it can express, so the records' "matmuls by X" hold.
    #[cfg(target_arch = "x86_64")]
    if blas.is_none()
        && super::simd::level() == super::simd::SimdLevel::Avx2
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
    let split = match blas {
        Some(_) => split::split_for_blas(&dst, threads),
        None => split::split_for(&dst, b, threads),
    };
    if matches!(split, Split::Rows | Split::Columns) {
        let blocks = split::blocks(&split, dst, a, b, threads);
        return blocks.into_par_iter().for_each(|(block, a, b)| {
            // SAFETY: the blocks are disjoint parts of `dst`, each written by one thread.
            unsafe { matmul_out(blas, block, a, b, accumulate, 1) }
        });
    }
    if let Some(lib) = blas {
        let operand = |m: Mat| (m.data.as_ptr(), m.rows, m.cols, m.rs, m.cs);
        // SAFETY: as for gemm below.
        let done = unsafe {
            blas::sgemm(
                lib,
                dst.ptr,
                (dst.rows, dst.cols),
                (dst.rs, dst.cs),
                accumulate,
                operand(a),
                operand(b),
                a.cols,
            )
        };
        if done {
            return;
        }
    }
    let gemm_threads = if split == Split::Gemms { threads } else { 1 };
    // SAFETY: the input views were bounds-checked when they were made, shapes agree
    // (asserted above), the caller vouches for `dst`, and gemm reads exactly the
    // elements the views describe; strides are non-negative (usize).
    level::gemm_at_level(
        gemm_threads,
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

    pub(super) fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
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

    /// Each element of `c`, read with strides `(rs, cs)`, is the row-major `want` plus
    /// `plus`, within float rounding.
    pub(super) fn assert_strided_equals(
        c: &[f32],
        (rs, cs): (usize, usize),
        want: &[f32],
        n: usize,
        plus: f32,
        case: &str,
    ) {
        for (at, w) in want.iter().enumerate() {
            let (i, j) = (at / n, at % n);
            let (got, expect) = (c[i * rs + j * cs], w + plus);
            assert!(
                (got - expect).abs() <= 1e-4 * (1.0 + expect.abs()),
                "{case}: ({i},{j}) {got} vs {expect}"
            );
        }
    }

    fn two_threads() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
    }

    /// A split test's inputs: `a (m, k)` and the storage of `b (k, n)`.
    fn inputs(m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let a = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        (a, b)
    }

    /// `b (k, n)` over `data`: row-major, or a transposed view of an `(n, k)` matrix.
    fn b_view(data: &[f32], k: usize, n: usize, transposed: bool) -> Mat<'_> {
        if transposed {
            Mat::rows(data, n, k).t()
        } else {
            Mat::rows(data, k, n)
        }
    }

    /// A row-major `(m, n)` destination to ask a split rule about (never written).
    fn probe_out(m: usize, n: usize) -> Out {
        Out {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            rows: m,
            cols: n,
            rs: n,
            cs: 1,
        }
    }

    /// The naive product of `a (m, k)` and any view `b`.
    fn naive_of(a: &[f32], b: Mat) -> Vec<f32> {
        let (k, n) = (b.rows, b.cols);
        let dense: Vec<f32> = (0..k * n)
            .map(|i| b.data[(i / n) * b.rs + (i % n) * b.cs])
            .collect();
        naive(a, &dense, a.len() / k.max(1), k, n)
    }

    /// Each way of sharing a product between threads (rows; columns for a transposed
    /// `b`; gemm's own threading for a wide transposed `b`) is taken on these shapes and
    /// gives the single-threaded product's bits exactly: every element's sum runs over
    /// the inner dimension in the same blocks, so a run's numbers do not depend on the
    /// thread count.
    #[test]
    fn every_split_over_threads_gives_the_single_threaded_bits() {
        let pool = two_threads();
        let cases = [
            // (m, k, n, b transposed, the split taken on 2 threads)
            (96, 40, 72, false, Split::Rows),
            (96, 600, 72, true, Split::Columns),
            (20, 9, 8200, true, Split::Gemms),
            (8, 40, 72, true, Split::None),
        ];
        for (m, k, n, transposed, want_split) in cases {
            let (a, b) = inputs(m, k, n);
            let bm = b_view(&b, k, n, transposed);
            let out = probe_out(m, n);
            assert_eq!(split::split_for(&out, bm, 2), want_split, "{m}x{k}x{n}");
            for accumulate in [false, true] {
                let start: Vec<f32> = (0..m * n).map(|i| (i % 5) as f32).collect();
                let mut one = start.clone();
                matmul_on(
                    route::Matmul::Gemm,
                    MatMut::rows(&mut one, m, n),
                    Mat::rows(&a, m, k),
                    bm,
                    accumulate,
                    1,
                );
                let mut two = start.clone();
                pool.install(|| {
                    matmul_on(
                        route::Matmul::Gemm,
                        MatMut::rows(&mut two, m, n),
                        Mat::rows(&a, m, k),
                        bm,
                        accumulate,
                        2,
                    )
                });
                let want = naive_of(&a, bm);
                for i in 0..m * n {
                    assert_eq!(
                        one[i].to_bits(),
                        two[i].to_bits(),
                        "{want_split:?} {m}x{k}x{n} at {i}"
                    );
                    let expect = want[i] + if accumulate { start[i] } else { 0.0 };
                    assert!((one[i] - expect).abs() <= 1e-4 * (1.0 + expect.abs()));
                }
            }
        }
    }

    /// The blas route (where a BLAS is installed: scripts/test.sh installs one) computes
    /// the product of every split by the library, equal to a naive product, and gives the
    /// same bits again at the same thread count.
    #[test]
    fn the_blas_route_computes_every_split_by_the_library_and_repeats_its_bits() {
        if let Err(e) = blas::library() {
            assert!(
                std::env::var("TP_TEST_BLAS").as_deref() != Ok("required"),
                "{e}"
            );
            return eprintln!("skipped: {e}");
        }
        let pool = two_threads();
        let cases = [
            // (m, k, n, b transposed, the split taken on 2 threads)
            (96, 40, 72, false, Split::Rows),
            (96, 600, 72, true, Split::Rows),
            (20, 9, 8200, true, Split::Columns),
            (8, 40, 72, true, Split::Columns),
            (8, 40, 20, false, Split::None),
        ];
        for (m, k, n, transposed, want_split) in cases {
            let (a, b) = inputs(m, k, n);
            let bm = b_view(&b, k, n, transposed);
            let out = probe_out(m, n);
            assert_eq!(split::split_for_blas(&out, 2), want_split, "{m}x{k}x{n}");
            let want = naive_of(&a, bm);
            let product = || {
                let mut c = vec![f32::NAN; m * n];
                let before = blas::calls();
                pool.install(|| {
                    matmul_on(
                        route::Matmul::Blas,
                        MatMut::rows(&mut c, m, n),
                        Mat::rows(&a, m, k),
                        bm,
                        false,
                        2,
                    )
                });
                let parts = if want_split == Split::None { 1 } else { 2 };
                assert!(
                    blas::calls() >= before + parts,
                    "{m}x{k}x{n}: not by the BLAS"
                );
                c
            };
            let (first, again) = (product(), product());
            for i in 0..m * n {
                assert_eq!(first[i].to_bits(), again[i].to_bits(), "{m}x{k}x{n} at {i}");
                assert!((first[i] - want[i]).abs() <= 1e-4 * (1.0 + want[i].abs()));
            }
        }
    }
}
