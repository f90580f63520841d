//! How a product with a row-major destination is shared between threads, and the
//! blocks each thread computes.

use super::view::{Mat, Out};

/// How a product with a row-major `dst` is shared between threads.
#[derive(Debug, PartialEq)]
pub(super) enum Split {
    /// One block of `dst`'s rows per thread ([`blocks`]).
    Rows,
    /// One block of `dst`'s columns per thread ([`blocks`]).
    Columns,
    /// gemm's own threading.
    Gemms,
    /// Too small to share.
    None,
}

/// How to share a product between `threads` threads. By rows unless told otherwise: on
/// the model's shapes (a few hundred to a few thousand rows, 128-3072 columns) that
/// scales where gemm's own threading does not. Not when `b` is a transposed view (rows contiguous, columns strided: the backward's `dy @ W^T`, the
/// tied head's `x @ wte^T`): gemm vectorises along `dst`'s rows, i.e. along `b`'s
/// columns, so it gathers such a `b` into its packed panels one element at a time, and
/// split by rows every thread gathers all of it. Split by columns each gathers its own
/// part: GPT-2's four `dy @ W^T` of a layer on 2 threads (AMD Zen 4) took 6.2, 13.8,
/// 8.1 and 1.9 ms by rows, 5.1-5.7, 6.6-7.4, 6.9 and 1.4-1.5 by columns (`x @ W` of the
/// same sizes: 4.5-6.9). For a wide `b`, the head's 50304 columns, each thread's
/// columns would span many of gemm's blocks, every one of which reads all of the packed
/// `a` again: by columns 181-194 ms, by rows 154-157, gemm's own threading 128-140.
pub(super) fn split_for(dst: &Out, b: Mat, threads: usize) -> Split {
    const WIDE: usize = 8192;
    // Blocks of a row-major `dst` with rows at least a row apart never share an element.
    if threads < 2 || dst.cs != 1 || dst.rs < dst.cols {
        return Split::None;
    }
    let transposed_b = b.rs == 1 && b.cs != 1 && b.cols > 1 && dst.rows >= 16;
    if transposed_b && dst.cols > WIDE {
        Split::Gemms
    } else if transposed_b && dst.cols >= 32 * threads {
        Split::Columns
    } else if dst.rows >= 32 * threads {
        Split::Rows
    } else {
        Split::None
    }
}

/// How to share a product computed by a BLAS (one thread per call) between `threads`
/// threads: along the longer side of `dst`. Each thread packs its own part of `b` (split
/// by columns) or of `a` (by rows) and all of the other operand, so the split that keeps
/// the shared operand small packs least: GPT-2's `256 x 768 @ 768 x 2304` on 2 threads
/// with MKL (Intel Xeon 6/207, 2026-11-28) ran at 96-105 GFLOP/s a core split by rows,
/// at 97-144 (about 121 over a 20-second loop) by columns; 152-155 on one thread.
pub(super) fn split_for_blas(dst: &Out, threads: usize) -> Split {
    if threads < 2 || dst.cs != 1 || dst.rs < dst.cols {
        return Split::None;
    }
    if dst.cols >= dst.rows && dst.cols >= 32 * threads {
        Split::Columns
    } else if dst.rows >= 32 * threads {
        Split::Rows
    } else {
        Split::None
    }
}

/// One block per thread of `dst` split by `split` (rows or columns): each block's
/// destination with the rows of `a` and the columns of `b` it needs. The blocks are
/// disjoint; rows are `rs >= cols` apart (`split_for` holds it), so no two share an
/// element.
pub(super) fn blocks<'a>(
    split: &Split,
    dst: Out,
    a: Mat<'a>,
    b: Mat<'a>,
    threads: usize,
) -> Vec<(Out, Mat<'a>, Mat<'a>)> {
    match split {
        Split::Rows => {
            let per = dst.rows.div_ceil(threads);
            (0..dst.rows)
                .step_by(per)
                .map(|r0| {
                    let rows = per.min(dst.rows - r0);
                    // SAFETY: row r0 lies inside `dst`.
                    let ptr = unsafe { dst.ptr.add(r0 * dst.rs) };
                    let a = a.block(r0, r0 + rows, 0, a.cols);
                    (Out { ptr, rows, ..dst }, a, b)
                })
                .collect()
        }
        Split::Columns => {
            // Multiples of 16 columns: whole AVX-512 rows of gemm's micro-kernel in each.
            let per = dst.cols.div_ceil(threads).next_multiple_of(16);
            (0..dst.cols)
                .step_by(per)
                .map(|c0| {
                    let cols = per.min(dst.cols - c0);
                    // SAFETY: column c0 lies inside `dst`.
                    let ptr = unsafe { dst.ptr.add(c0 * dst.cs) };
                    let b = b.block(0, b.rows, c0, c0 + cols);
                    (Out { ptr, cols, ..dst }, a, b)
                })
                .collect()
        }
        Split::Gemms | Split::None => vec![(dst, a, b)],
    }
}
