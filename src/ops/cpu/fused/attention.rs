//! Causal self-attention of a packed `qkv (B, T, 3L)` (`L = heads * head_dim`; Q, K and V
//! each `L` columns, head h at columns `h*hd..(h+1)*hd` of its part) to `y (B, T, L)`, as
//! one op. Per (batch, head) it keeps one `T x T` scratch matrix: forward computes
//! `softmax(Q K^T / sqrt(hd))` masked to j <= i and multiplies by V; backward recomputes
//! the probabilities (as flash attention does) instead of storing `B x H x T x T` of them.
//! Q, K, V and the output are read and written in place through strided views: no head
//! split, transpose or concatenation copies in either direction.

use super::softmax::{causal_softmax_row, softmax_grad_row};
use super::storage::{slice_of, with_f32};
use crate::ops::cpu::gemm::{matmul, Mat, MatMut};
use crate::ops::profile::{timed, OpKind};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

struct CausalAttention {
    heads: usize,
    head_dim: usize,
}

impl CausalAttention {
    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// Views of head `h`'s Q, K or V (`part` 0, 1, 2) in one sequence's `(T, 3L)` rows.
    fn part<'a>(&self, seq: &'a [f32], t: usize, part: usize, h: usize) -> Mat<'a> {
        let l = self.heads * self.head_dim;
        let at = part * l + h * self.head_dim;
        Mat::strided(&seq[at..], t, self.head_dim, 3 * l, 1)
    }

    /// Probabilities `P (T, T)` of head `h` of one sequence into `p`: each row block
    /// multiplies only the keys it can see (see [`causal_blocks`]); the columns past a
    /// block's end are left as they were and zeroed by the row's softmax.
    fn probs(&self, seq: &[f32], t: usize, h: usize, p: &mut [f32]) {
        let q = self.part(seq, t, 0, h);
        let k = self.part(seq, t, 1, h);
        for (r0, r1) in causal_blocks(t) {
            let dst = MatMut::strided(&mut p[r0 * t..], r1 - r0, r1, t, 1);
            matmul(
                dst,
                q.block(r0, r1, 0, q.cols),
                k.block(0, r1, 0, k.cols).t(),
                false,
                1,
            );
        }
        for (i, row) in p.chunks_exact_mut(t).enumerate() {
            causal_softmax_row(row, i, self.scale());
        }
    }

    /// `y` rows `(T, L)` of one sequence.
    fn forward_seq(&self, seq: &[f32], t: usize, y: &mut [f32], p: &mut [f32]) {
        let (l, hd) = (self.heads * self.head_dim, self.head_dim);
        for h in 0..self.heads {
            self.probs(seq, t, h, p);
            let v = self.part(seq, t, 2, h);
            let pm = Mat::rows(p, t, t);
            for (r0, r1) in causal_blocks(t) {
                let dst = MatMut::strided(&mut y[r0 * l + h * hd..], r1 - r0, hd, l, 1);
                matmul(
                    dst,
                    pm.block(r0, r1, 0, r1),
                    v.block(0, r1, 0, hd),
                    false,
                    1,
                );
            }
        }
    }

    /// `dqkv` rows `(T, 3L)` of one sequence from its `dy (T, L)`. Every product skips
    /// the blocks the causal mask makes zero, as [`Self::probs`] does.
    fn backward_seq(&self, seq: &[f32], dy: &[f32], t: usize, dqkv: &mut [f32], s: &mut Scratch) {
        let (l, hd) = (self.heads * self.head_dim, self.head_dim);
        for h in 0..self.heads {
            self.probs(seq, t, h, &mut s.p);
            let dyh = Mat::strided(&dy[h * hd..], t, hd, l, 1);
            let (q, k, v) = (
                self.part(seq, t, 0, h),
                self.part(seq, t, 1, h),
                self.part(seq, t, 2, h),
            );
            let pm = Mat::rows(&s.p, t, t);
            for (r0, r1) in causal_blocks(t) {
                // dP = dY V^T on the live block, then dS = P * (dP - <P, dP>) / sqrt(hd)
                // on each row's live part (P is zero past it).
                let dst = MatMut::strided(&mut s.dp[r0 * t..], r1 - r0, r1, t, 1);
                matmul(
                    dst,
                    dyh.block(r0, r1, 0, hd),
                    v.block(0, r1, 0, hd).t(),
                    false,
                    1,
                );
                for i in r0..r1 {
                    let row = i * t..i * t + r1;
                    softmax_grad_row(
                        &s.p[row.clone()],
                        &s.dp[row.clone()],
                        self.scale(),
                        &mut s.ds[row],
                    );
                }
            }
            let ds = Mat::rows(&s.ds, t, t);
            for (c0, c1) in causal_blocks(t) {
                // Rows r0..r1 of dQ = dS K; rows c0..c1 of dV = P^T dY and dK = dS^T Q,
                // from the query rows that see those keys (c0..T).
                let (r0, r1) = (c0, c1);
                let dq = MatMut::strided(&mut dqkv[r0 * 3 * l + h * hd..], r1 - r0, hd, 3 * l, 1);
                matmul(dq, ds.block(r0, r1, 0, r1), k.block(0, r1, 0, hd), false, 1);
                let at = c0 * 3 * l;
                let dv = MatMut::strided(&mut dqkv[at + 2 * l + h * hd..], c1 - c0, hd, 3 * l, 1);
                matmul(
                    dv,
                    pm.block(c0, t, c0, c1).t(),
                    dyh.block(c0, t, 0, hd),
                    false,
                    1,
                );
                let dk = MatMut::strided(&mut dqkv[at + l + h * hd..], c1 - c0, hd, 3 * l, 1);
                matmul(
                    dk,
                    ds.block(c0, t, c0, c1).t(),
                    q.block(c0, t, 0, hd),
                    false,
                    1,
                );
            }
        }
    }

    fn flops(&self, b: usize, t: usize) -> f64 {
        // Two (T x T x hd) products a head; the backward does five (one recomputes P).
        // Counted dense, as PyTorch's eager attention computes them: the causal blocks
        // skip part of this, so the profile's rate for attention is an effective one.
        (2 * b * self.heads * t * t * self.head_dim) as f64 * 2.0
    }
}

/// Row blocks `[r0, r1)` of a `T x T` causal score matrix: rows of a block see keys
/// `0..r1` only, so the products of a block skip the columns past it (about 1/4 of the
/// work with two blocks, 3/8 with four). Blocks of 32 rows at least, so each product
/// stays large enough for the matmul kernels.
fn causal_blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = (t / 32).clamp(1, 4);
    let size = t.div_ceil(n);
    (0..n)
        .map(move |b| (b * size, ((b + 1) * size).min(t)))
        .filter(|(a, b)| a < b)
}

struct Scratch {
    p: Vec<f32>,
    dp: Vec<f32>,
    ds: Vec<f32>,
}

/// Runs `f(sequence, out_rows)` for each sequence of `out` (rows of `width` values, `t` a
/// sequence): in parallel over sequences when candle runs more than one thread.
fn per_sequence(out: &mut [f32], t: usize, width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let run = |(i, o): (usize, &mut [f32])| f(i, o);
    if crate::ops::cpu::gemm::threads() <= 1 {
        out.chunks_exact_mut(t * width).enumerate().for_each(run);
    } else {
        out.par_chunks_exact_mut(t * width)
            .enumerate()
            .for_each(run);
    }
}

impl CustomOp1 for CausalAttention {
    fn name(&self) -> &'static str {
        "fused-causal-attention"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = slice_of(s, l)?;
        let &[b, t, w] = l.dims() else {
            candle_core::bail!("attention: qkv must be (B, T, 3L), got {:?}", l.dims());
        };
        let width = self.heads * self.head_dim;
        if w != 3 * width {
            candle_core::bail!("attention: qkv has {w} columns, expected {}", 3 * width);
        }
        let y = timed(OpKind::AttentionFwd, self.flops(b, t), || {
            let mut y = vec![0f32; b * t * width];
            per_sequence(&mut y, t, width, |i, ys| {
                let mut p = vec![0f32; t * t];
                self.forward_seq(&qkv[i * t * w..(i + 1) * t * w], t, ys, &mut p);
            });
            y
        });
        Ok((CpuStorage::F32(y), Shape::from((b, t, width))))
    }
    fn bwd(&self, qkv: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let (b, t, w) = qkv.dims3()?;
        let width = self.heads * self.head_dim;
        let dqkv = with_f32(qkv, |x| {
            with_f32(grad, |dy| {
                timed(OpKind::AttentionBwd, self.flops(b, t) * 2.5, || {
                    let mut dqkv = vec![0f32; x.len()];
                    per_sequence(&mut dqkv, t, w, |i, d| {
                        let mut s = Scratch {
                            p: vec![0f32; t * t],
                            dp: vec![0f32; t * t],
                            ds: vec![0f32; t * t],
                        };
                        let seq = &x[i * t * w..(i + 1) * t * w];
                        let dys = &dy[i * t * width..(i + 1) * t * width];
                        self.backward_seq(seq, dys, t, d, &mut s);
                    });
                    dqkv
                })
            })
        })??;
        Ok(Some(Tensor::from_vec(dqkv, qkv.shape(), qkv.device())?))
    }
}

/// `qkv (B, T, 3 * heads * head_dim)` -> `y (B, T, heads * head_dim)`.
pub fn causal_attention(qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    qkv.contiguous()?
        .apply_op1(CausalAttention { heads, head_dim })
}
