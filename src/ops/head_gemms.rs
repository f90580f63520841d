//! The plan of the GPU's packed attention (`ops::cuda::packed_attention`): which per-head
//! matrix products read and write where inside the packed qkv `(B, T, 3L)`, the scores
//! `(B, H, T, T)` and the merged `(B, T, L)`, and the cuBLAS calls that carry them out
//! (row-major `C = op(A) op(B)` is column-major `C^T = op(B)^T op(A)^T`, so cuBLAS gets B
//! first). Kept apart from the CUDA code so that the CPU build checks it: the tests below
//! run the calls through a plain interpreter of cuBLAS's column-major batched GEMM and
//! hold every product to attention written out by hand.

use candle_core::Shape;

/// The sizes of one attention: batch, sequence, heads, head size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub d: usize,
}

impl Sizes {
    /// `L = heads * head_dim`.
    pub fn l(&self) -> usize {
        self.h * self.d
    }

    /// From the dims of a packed `qkv (B, T, 3L)`.
    pub fn of_qkv(dims: &[usize], h: usize, d: usize) -> Option<Self> {
        match *dims {
            [b, t, w] if w == 3 * h * d && d > 0 => Some(Self { b, t, h, d }),
            _ => None,
        }
    }
}

/// Where a GEMM operand's matrices lie: which buffer (`0` and `1` the op's inputs, `2` its
/// output), the element offset of sequence 0's head 0, the offset from one sequence to
/// the next and from one head to the next, the row-major leading dimension, and whether
/// the operand enters transposed.
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub buf: usize,
    pub at: usize,
    pub per_seq: usize,
    pub per_head: usize,
    pub ld: usize,
    pub trans: bool,
}

/// One row-major product a head, `C (M x N) = op(A) op(B)` with `K` the inner size, for
/// every head of every sequence.
#[derive(Debug, Clone, Copy)]
pub struct HeadGemm {
    pub mnk: (usize, usize, usize),
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
}

fn qkv_block(s: Sizes, buf: usize, block: usize, trans: bool) -> Operand {
    let w = 3 * s.l();
    let (per_seq, per_head, at) = (s.t * w, s.d, block * s.l());
    Operand {
        buf,
        at,
        per_seq,
        per_head,
        ld: w,
        trans,
    }
}

fn scores_in(s: Sizes, buf: usize, trans: bool) -> Operand {
    let (per_seq, per_head) = (s.h * s.t * s.t, s.t * s.t);
    Operand {
        buf,
        at: 0,
        per_seq,
        per_head,
        ld: s.t,
        trans,
    }
}

fn merged_in(s: Sizes, buf: usize, trans: bool) -> Operand {
    let (per_seq, per_head) = (s.t * s.l(), s.d);
    Operand {
        buf,
        at: 0,
        per_seq,
        per_head,
        ld: s.l(),
        trans,
    }
}

/// The kinds of product, each an op of candle's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `(qkv) -> scores`: `S = Q K^T`.
    Scores,
    /// `(qkv, dS) -> dqkv`: `dQ = dS K`, `dK = dS^T Q`, dV 0.
    ScoresGrad,
    /// `(P, qkv) -> y`: `Y = P V`, merged.
    Values,
    /// `(dY, qkv) -> dP`: `dP = dY V^T`.
    ValuesGradP,
    /// `(P, dY) -> dqkv`: `dV = P^T dY`, dQ and dK 0.
    ValuesGradV,
}

impl Kind {
    /// The products, their output's shape, and whether it starts zeroed (a packed
    /// gradient of which the products write only some blocks).
    pub fn plan(self, s: Sizes) -> (Vec<HeadGemm>, Shape, bool) {
        let (t, d) = (s.t, s.d);
        let packed = Shape::from((s.b, t, 3 * s.l()));
        let scores = Shape::from((s.b, s.h, t, t));
        let one = |mnk, a, b, c| vec![HeadGemm { mnk, a, b, c }];
        match self {
            Kind::Scores => {
                let (q, kt) = (qkv_block(s, 0, 0, false), qkv_block(s, 0, 1, true));
                (one((t, t, d), q, kt, scores_in(s, 2, false)), scores, false)
            }
            Kind::ScoresGrad => {
                let (ds, dst) = (scores_in(s, 1, false), scores_in(s, 1, true));
                let (q, k) = (qkv_block(s, 0, 0, false), qkv_block(s, 0, 1, false));
                let (dq, dk) = (qkv_block(s, 2, 0, false), qkv_block(s, 2, 1, false));
                let gemms = [one((t, d, t), ds, k, dq), one((t, d, t), dst, q, dk)].concat();
                (gemms, packed, true)
            }
            Kind::Values => {
                let (p, v, y) = (
                    scores_in(s, 0, false),
                    qkv_block(s, 1, 2, false),
                    merged_in(s, 2, false),
                );
                (one((t, d, t), p, v, y), Shape::from((s.b, t, s.l())), false)
            }
            Kind::ValuesGradP => {
                let (dy, vt) = (merged_in(s, 0, false), qkv_block(s, 1, 2, true));
                (
                    one((t, t, d), dy, vt, scores_in(s, 2, false)),
                    scores,
                    false,
                )
            }
            Kind::ValuesGradV => {
                let (pt, dy) = (scores_in(s, 0, true), merged_in(s, 1, false));
                (
                    one((t, d, t), pt, dy, qkv_block(s, 2, 2, false)),
                    packed,
                    true,
                )
            }
        }
    }
}

/// One product's cuBLAS GEMMs, column-major (`C_i = op(A_i) op(B_i)`, row-major's
/// operands swapped): a matrix for each head of each sequence, each operand a buffer and
/// the element offset of sequence 0's head 0, its steps to the next sequence and the
/// next head, and its leading dimension. On a GPU one pointer-array batch
/// (`cublasGemmBatchedEx`) over all `seqs x heads` matrices, or, as before, one strided
/// batch a sequence over its heads (`cublasGemmStridedBatchedEx`): a head's operands lie
/// one stride from the next head's but another from the next sequence's, so a strided
/// batch cannot take both, and a sequence's 12 matrices gave each call too few blocks to
/// fill an H200 (GPT-2's attention products, 0.93 TFLOP a step, took 6.6 ms of its 39.7
/// ms step in 576 calls, 2026-11-29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlasCall {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    /// A, B and C: (buffer, offset, per sequence, per head), in elements.
    pub operands: [(usize, usize, usize, usize); 3],
    pub seqs: usize,
    pub heads: usize,
}

impl BlasCall {
    /// Operand `which`'s (0 A, 1 B, 2 C) buffer and element offset in matrix `i` (sequence
    /// `i / heads`, head `i % heads`): the formula `kernels/head_addresses.cu` computes.
    pub fn matrix(&self, which: usize, i: usize) -> (usize, usize) {
        let (buf, at, per_seq, per_head) = self.operands[which];
        (
            buf,
            at + (i / self.heads) * per_seq + (i % self.heads) * per_head,
        )
    }

    /// How many matrices: every head of every sequence.
    pub fn count(&self) -> usize {
        self.seqs * self.heads
    }
}

/// The calls that carry out `gemms`: one a product.
pub fn blas_calls(gemms: &[HeadGemm], s: Sizes) -> Vec<BlasCall> {
    let operand = |o: &Operand| (o.buf, o.at, o.per_seq, o.per_head);
    gemms
        .iter()
        .map(|g| {
            let (m, n, k) = g.mnk;
            BlasCall {
                trans_a: g.b.trans,
                trans_b: g.a.trans,
                m: n,
                n: m,
                k,
                lda: g.b.ld,
                ldb: g.a.ld,
                ldc: g.c.ld,
                operands: [operand(&g.b), operand(&g.a), operand(&g.c)],
                seqs: s.b,
                heads: s.h,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cuBLAS's column-major batched GEMM, written out (alpha 1, beta 0), over the
    /// matrices `BlasCall::matrix` places.
    fn interpret(call: &BlasCall, bufs: &mut [Vec<f64>; 3]) {
        for i in 0..call.count() {
            let [(ab, a), (bb, b), (cb, c)] = [0, 1, 2].map(|w| call.matrix(w, i));
            for x in 0..call.m {
                for y in 0..call.n {
                    let mut acc = 0.0;
                    for z in 0..call.k {
                        let av = match call.trans_a {
                            false => bufs[ab][a + x + z * call.lda],
                            true => bufs[ab][a + z + x * call.lda],
                        };
                        let bv = match call.trans_b {
                            false => bufs[bb][b + z + y * call.ldb],
                            true => bufs[bb][b + y + z * call.ldb],
                        };
                        acc += av * bv;
                    }
                    bufs[cb][c + x + y * call.ldc] = acc;
                }
            }
        }
    }

    /// The output of `kind` on inputs `a` and `b`, through its plan's cuBLAS calls.
    fn run(kind: Kind, s: Sizes, a: &[f64], b: &[f64]) -> Vec<f64> {
        let (gemms, shape, _) = kind.plan(s);
        let mut bufs = [a.to_vec(), b.to_vec(), vec![0.0; shape.elem_count()]];
        let calls = blas_calls(&gemms, s);
        // One call a product, each over every sequence's every head.
        assert_eq!(calls.len(), gemms.len(), "{kind:?}");
        for call in calls {
            assert_eq!(call.count(), s.b * s.h, "{kind:?}");
            interpret(&call, &mut bufs);
        }
        bufs[2].clone()
    }

    fn values(n: usize, seed: usize) -> Vec<f64> {
        (0..n)
            .map(|i| (((i * 7 + seed * 13) % 23) as f64 - 11.0) / 7.0)
            .collect()
    }

    fn assert_close(got: &[f64], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < 1e-9, "{what}[{i}]: {g} vs {w}");
        }
    }

    /// Every product of the plan, through cuBLAS's argument order, equals attention's
    /// products written out by hand: the scores, the merged output, and the three
    /// gradients each in its block of the packed layout (the others 0), at sizes where
    /// every stride differs (B 2, T 5, H 3, D 4).
    #[test]
    fn the_packed_attention_plan_computes_attentions_products_in_place() {
        let s = Sizes {
            b: 2,
            t: 5,
            h: 3,
            d: 4,
        };
        let (b, t, h, d, l) = (s.b, s.t, s.h, s.d, s.l());
        let qkv = values(b * t * 3 * l, 1);
        let sc = values(b * h * t * t, 2); // a P or a dS
        let my = values(b * t * l, 3); // a dY
        let part =
            |x: &[f64], bi, row, blk, hi, di| x[(bi * t + row) * 3 * l + blk * l + hi * d + di];
        let (qi, ki, vi) = (0, 1, 2);
        let si = |bi, hi, i, j| ((bi * h + hi) * t + i) * t + j;
        let mi = |bi, row, hi, di| (bi * t + row) * l + hi * d + di;
        let mut scores = vec![0.0; b * h * t * t];
        let mut y = vec![0.0; b * t * l];
        let mut dqkv_s = vec![0.0; b * t * 3 * l];
        let mut dp = vec![0.0; b * h * t * t];
        let mut dqkv_v = vec![0.0; b * t * 3 * l];
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..t {
                    for j in 0..t {
                        scores[si(bi, hi, i, j)] = (0..d)
                            .map(|di| part(&qkv, bi, i, qi, hi, di) * part(&qkv, bi, j, ki, hi, di))
                            .sum();
                        dp[si(bi, hi, i, j)] = (0..d)
                            .map(|di| my[mi(bi, i, hi, di)] * part(&qkv, bi, j, vi, hi, di))
                            .sum();
                    }
                    for di in 0..d {
                        y[mi(bi, i, hi, di)] = (0..t)
                            .map(|j| sc[si(bi, hi, i, j)] * part(&qkv, bi, j, vi, hi, di))
                            .sum();
                        let at = |blk| (bi * t + i) * 3 * l + blk * l + hi * d + di;
                        dqkv_s[at(qi)] = (0..t)
                            .map(|j| sc[si(bi, hi, i, j)] * part(&qkv, bi, j, ki, hi, di))
                            .sum();
                        dqkv_s[at(ki)] = (0..t)
                            .map(|j| sc[si(bi, hi, j, i)] * part(&qkv, bi, j, qi, hi, di))
                            .sum();
                        dqkv_v[at(vi)] = (0..t)
                            .map(|j| sc[si(bi, hi, j, i)] * my[mi(bi, j, hi, di)])
                            .sum();
                    }
                }
            }
        }
        assert_close(&run(Kind::Scores, s, &qkv, &[]), &scores, "scores");
        assert_close(&run(Kind::Values, s, &sc, &qkv), &y, "y = P V");
        assert_close(&run(Kind::ScoresGrad, s, &qkv, &sc), &dqkv_s, "dQ, dK");
        assert_close(&run(Kind::ValuesGradP, s, &my, &qkv), &dp, "dP");
        assert_close(&run(Kind::ValuesGradV, s, &sc, &my), &dqkv_v, "dV");
    }

    /// The zeroed outputs are exactly the packed gradients, whose other blocks no product
    /// writes.
    #[test]
    fn only_the_packed_gradients_start_zeroed() {
        let s = Sizes {
            b: 1,
            t: 2,
            h: 1,
            d: 2,
        };
        for (kind, zeroed) in [
            (Kind::Scores, false),
            (Kind::ScoresGrad, true),
            (Kind::Values, false),
            (Kind::ValuesGradP, false),
            (Kind::ValuesGradV, true),
        ] {
            assert_eq!(kind.plan(s).2, zeroed, "{kind:?}");
        }
        assert_eq!(
            Sizes::of_qkv(&[2, 5, 36], 3, 4),
            Some(Sizes {
                b: 2,
                t: 5,
                h: 3,
                d: 4
            })
        );
        assert_eq!(Sizes::of_qkv(&[2, 5, 35], 3, 4), None);
    }
}
