//! The local half of a cross-entropy whose logits are split by columns over ranks (the
//! vocabulary-parallel loss), as one op: per row of `x (N, V_r)` shifted by the rows'
//! maxima over every rank, the sum of exponentials and the target's shifted logit (0
//! where another rank owns the target). The backward is one pass too:
//! `dx = g_sum * exp(x - shift) + g_target * onehot`.

use super::storage::{slice_of, with_f32};
use crate::ops::cpu::fastmath;
use crate::ops::cpu::simd::simd_kernel;
use crate::ops::profile::{timed, OpKind};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Rows per parallel block (rows are vocabulary-wide).
const ROWS: usize = 8;

fn parallel() -> bool {
    crate::ops::cpu::gemm::threads() > 1
}

simd_kernel! {
/// Each row's maximum.
fn maxima(x: &[f32], v: usize, out: &mut [f32]) {
    for (row, o) in x.chunks_exact(v).zip(out) {
        *o = fastmath::max(row);
    }
}
}

/// `(N, 1)`: the maximum of each row of `x (N, V)` (no gradient: a shift).
pub fn row_max(x: &Tensor) -> Result<Tensor> {
    let (n, v) = x.dims2()?;
    let out = with_f32(x, |x| {
        timed(OpKind::CrossEntropy, 0.0, || {
            let mut out = vec![0f32; n];
            if parallel() && n > ROWS {
                out.par_chunks_mut(ROWS)
                    .zip(x.par_chunks(ROWS * v))
                    .for_each(|(o, x)| maxima(x, v, o));
            } else {
                maxima(x, v, &mut out);
            }
            out
        })
    })?;
    Tensor::from_vec(out, (n, 1), x.device())
}

/// The row statistics' constants: shifts, and local targets (`None`: another rank's).
struct ShardStats {
    shift: Vec<f32>,
    target: Vec<Option<u32>>,
}

simd_kernel! {
/// `[sum exp(x - shift), x[target] - shift or 0]` of each row.
fn stats_rows(x: &[f32], shift: &[f32], target: &[Option<u32>], v: usize, out: &mut [f32]) {
    for (((row, &s), t), o) in x.chunks_exact(v).zip(shift).zip(target).zip(out.chunks_exact_mut(2)) {
        o[0] = fastmath::sum_exp(row, s);
        o[1] = t.map_or(0.0, |t| row[t as usize] - s);
    }
}
}

simd_kernel! {
/// `dx = g_sum * exp(x - shift) + g_target * onehot(target)`, row by row.
fn stats_grad(x: &[f32], shift: &[f32], target: &[Option<u32>], g: &[f32], v: usize, dx: &mut [f32]) {
    for ((((row, d), &s), t), g) in x
        .chunks_exact(v)
        .zip(dx.chunks_exact_mut(v))
        .zip(shift)
        .zip(target)
        .zip(g.chunks_exact(2))
    {
        for (d, &r) in d.iter_mut().zip(row) {
            *d = g[0] * fastmath::exp(r - s);
        }
        if let Some(t) = t {
            d[*t as usize] += g[1];
        }
    }
}
}

impl CustomOp1 for ShardStats {
    fn name(&self) -> &'static str {
        "fused-shard-softmax-stats"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s, l)?;
        let &[n, v] = l.dims() else {
            candle_core::bail!(
                "shard statistics: logits must be (N, V), got {:?}",
                l.dims()
            );
        };
        let out = timed(OpKind::CrossEntropy, 0.0, || {
            let mut out = vec![0f32; 2 * n];
            if parallel() && n > ROWS {
                out.par_chunks_mut(2 * ROWS)
                    .zip(x.par_chunks(ROWS * v))
                    .zip(self.shift.par_chunks(ROWS))
                    .zip(self.target.par_chunks(ROWS))
                    .for_each(|(((o, x), s), t)| stats_rows(x, s, t, v, o));
            } else {
                stats_rows(x, &self.shift, &self.target, v, &mut out);
            }
            out
        });
        Ok((CpuStorage::F32(out), Shape::from((n, 2))))
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let g = grad.flatten_all()?.to_vec1::<f32>()?;
        let v = x.dim(1)?;
        let dx = with_f32(x, |x| {
            timed(OpKind::CrossEntropy, 0.0, || {
                let mut dx = vec![0f32; x.len()];
                if parallel() && self.shift.len() > ROWS {
                    dx.par_chunks_mut(ROWS * v)
                        .zip(x.par_chunks(ROWS * v))
                        .zip(self.shift.par_chunks(ROWS))
                        .zip(self.target.par_chunks(ROWS))
                        .zip(g.par_chunks(2 * ROWS))
                        .for_each(|((((d, x), s), t), g)| stats_grad(x, s, t, g, v, d));
                } else {
                    stats_grad(x, &self.shift, &self.target, &g, v, &mut dx);
                }
                dx
            })
        })?;
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

/// `(N, 2)` row statistics of `x (N, V)`: see the module docs. `shift (N, 1)` carries no
/// gradient; `target[i]` is row i's target column here, if this rank owns it.
pub fn shard_softmax_stats(x: &Tensor, shift: &Tensor, target: Vec<Option<u32>>) -> Result<Tensor> {
    let shift = shift.flatten_all()?.to_vec1::<f32>()?;
    x.contiguous()?.apply_op1(ShardStats { shift, target })
}
