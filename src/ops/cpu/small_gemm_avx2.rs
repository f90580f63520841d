//! Small matrix products (`C (+)= A @ B` of up to [`MAX_WORK`] multiply-adds) with AVX2 +
//! FMA register tiles, without gemm's per-call setup.
//!
//! Why: attention multiplies one head's blocks at a time (32 x 32 x 32 to 64 x 256 x 64),
//! hundreds of products a layer. On those, gemm's packing of both operands and its
//! dispatch cost about as much as the arithmetic (60-80 GFLOP/s on a core whose FMA peak
//! is 116); here A is read in place, B is packed only when its rows are not contiguous,
//! and a 6 x 16 tile of C stays in 12 of AVX2's 16 registers for the whole depth
//! (85-105 GFLOP/s on the same shapes). Large products keep gemm, whose cache blocking
//! wins there.
//!
//! Every function here needs AVX2 and FMA; callers check `simd::level()` first.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::cell::RefCell;

/// Products of at most this many multiply-adds (`m * n * k`) are small.
pub const MAX_WORK: usize = 1 << 20;

/// Rows of C in one register tile.
const MR: usize = 6;

thread_local! {
    /// B, packed row-major with its width rounded up to 8, when it must be.
    static PACKED_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `C (m x n)` at `c + i * c_rs + j` `(+)=` `A (m x k)` at `a + i * a_rs + p * a_cs` times
/// `B (k x n)` at `b + p * b_rs + j * b_cs`.
///
/// # Safety
/// The CPU has AVX2 and FMA; the pointers and strides describe valid matrices of these
/// shapes, C's rows do not overlap each other (`c_rs >= n`) nor A or B; when `accumulate`,
/// C is initialised.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn matmul(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    c_rs: usize,
    accumulate: bool,
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs, b_cs): (*const f32, usize, usize),
) {
    if b_cs == 1 && n % 8 == 0 {
        return tiles((m, n, k), c, c_rs, accumulate, (a, a_rs, a_cs), (b, b_rs));
    }
    // Rows of B contiguous and zero-padded to whole vectors: the tiles then load B the
    // same way whatever its layout, and padding columns are computed but never stored.
    let width = n.next_multiple_of(8);
    PACKED_B.with_borrow_mut(|packed| {
        packed.clear();
        packed.resize(k * width, 0.0);
        for p in 0..k {
            let row = &mut packed[p * width..p * width + n];
            for (j, x) in row.iter_mut().enumerate() {
                *x = *b.add(p * b_rs + j * b_cs);
            }
        }
        tiles(
            (m, n, k),
            c,
            c_rs,
            accumulate,
            (a, a_rs, a_cs),
            (packed.as_ptr(), width),
        )
    })
}

/// [`matmul`] with B's rows contiguous and readable up to `n` rounded up to 8.
///
/// # Safety
/// As [`matmul`], and B is readable up to column `n.next_multiple_of(8)` of each row.
#[target_feature(enable = "avx2,fma")]
unsafe fn tiles(
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    c_rs: usize,
    accumulate: bool,
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs): (*const f32, usize),
) {
    let mut j = 0;
    while j < n {
        // Two vectors of columns where at least nine remain, else one.
        let vectors = if n - j > 8 { 2 } else { 1 };
        let cols = (8 * vectors).min(n - j);
        let mut i = 0;
        while i < m {
            let rows = MR.min(m - i);
            let tile = Tile {
                k,
                a: a.add(i * a_rs),
                a_rs,
                a_cs,
                b: b.add(j),
                b_rs,
                c: c.add(i * c_rs + j),
                c_rs,
                cols,
                accumulate,
            };
            macro_rules! by_rows {
                ($v:literal) => {
                    match rows {
                        6 => tile.run::<6, $v>(),
                        5 => tile.run::<5, $v>(),
                        4 => tile.run::<4, $v>(),
                        3 => tile.run::<3, $v>(),
                        2 => tile.run::<2, $v>(),
                        _ => tile.run::<1, $v>(),
                    }
                };
            }
            if vectors == 2 {
                by_rows!(2)
            } else {
                by_rows!(1)
            }
            i += rows;
        }
        j += cols;
    }
}

/// One `M x 8V` block of C: its pointers, strides and the columns of it that exist.
struct Tile {
    k: usize,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    b_rs: usize,
    c: *mut f32,
    c_rs: usize,
    /// Columns of the tile inside C (the rest are padding: computed, not stored).
    cols: usize,
    accumulate: bool,
}

impl Tile {
    /// # Safety
    /// As [`tiles`], for this tile's rows and columns.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run<const M: usize, const V: usize>(&self) {
        let mut acc = [[_mm256_setzero_ps(); V]; M];
        for p in 0..self.k {
            let row = self.b.add(p * self.b_rs);
            let mut bv = [_mm256_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(row.add(8 * v));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*self.a.add(r * self.a_rs + p * self.a_cs));
                for v in 0..V {
                    acc_r[v] = _mm256_fmadd_ps(x, bv[v], acc_r[v]);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let out = self.c.add(r * self.c_rs);
            if self.cols == 8 * V {
                for (v, &x) in acc_r.iter().enumerate() {
                    let o = out.add(8 * v);
                    let x = if self.accumulate {
                        _mm256_add_ps(x, _mm256_loadu_ps(o))
                    } else {
                        x
                    };
                    _mm256_storeu_ps(o, x);
                }
            } else {
                let mut lanes = [0f32; 16];
                for (v, &x) in acc_r.iter().enumerate() {
                    _mm256_storeu_ps(lanes.as_mut_ptr().add(8 * v), x);
                }
                for (j, &x) in lanes[..self.cols].iter().enumerate() {
                    let o = out.add(j);
                    *o = if self.accumulate { *o + x } else { x };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile shape and edge (rows 1-13, columns around multiples of 8, depth 1 and
    /// odd), with A and B plain or transposed, overwritten or accumulated, equals a naive
    /// product in f64.
    #[test]
    fn small_products_match_a_naive_one_at_every_edge_and_layout() {
        if crate::ops::cpu::simd::detected() < crate::ops::cpu::simd::SimdLevel::Avx2 {
            return;
        }
        for (m, n, k) in [(1, 1, 1), (13, 7, 31), (6, 16, 5), (7, 17, 64), (32, 33, 9)] {
            let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
            let at: Vec<f32> = (0..m * k).map(|i| a[(i % m) * k + i / m]).collect();
            let bt: Vec<f32> = (0..k * n).map(|i| b[(i % k) * n + i / k]).collect();
            let want = |i: usize, j: usize| -> f64 {
                (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum()
            };
            let layouts_a = [(&a, k, 1), (&at, 1, m)];
            let layouts_b = [(&b, n, 1), (&bt, 1, k)];
            for (a, a_rs, a_cs) in layouts_a {
                for (b, b_rs, b_cs) in layouts_b {
                    for accumulate in [false, true] {
                        let c_rs = n + 3;
                        let mut c = vec![if accumulate { 0.5f32 } else { f32::NAN }; m * c_rs];
                        // SAFETY: AVX2 checked above; the buffers hold these shapes.
                        unsafe {
                            matmul(
                                (m, n, k),
                                c.as_mut_ptr(),
                                c_rs,
                                accumulate,
                                (a.as_ptr(), a_rs, a_cs),
                                (b.as_ptr(), b_rs, b_cs),
                            )
                        };
                        for i in 0..m {
                            for j in 0..n {
                                let expect = want(i, j) + if accumulate { 0.5 } else { 0.0 };
                                let got = c[i * c_rs + j] as f64;
                                assert!(
                                    (got - expect).abs() <= 1e-5 * (1.0 + expect.abs()),
                                    "{m}x{n}x{k} a_cs {a_cs} b_cs {b_cs} acc {accumulate}: ({i},{j}) {got} vs {expect}"
                                );
                            }
                            // The padding between rows is never written.
                            for j in n..c_rs {
                                let x = c[i * c_rs + j];
                                assert!(if accumulate { x == 0.5 } else { x.is_nan() });
                            }
                        }
                    }
                }
            }
        }
    }
}
