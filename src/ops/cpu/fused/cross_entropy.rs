//! Mean cross-entropy of `logits (N, V)` against `targets (N,)` u32, as one op: the
//! backward is `(softmax - onehot) / N`.

use super::storage::{slice_of, with_f32};
use crate::ops::cpu::fastmath;
use crate::ops::cpu::simd::simd_kernel;
use crate::ops::profile::{timed, OpKind};
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

struct CrossEntropy;

/// Row max and log-sum-exp of the row shifted by it.
#[inline(always)]
fn log_softmax_row(row: &[f32]) -> (f32, f32) {
    let max = fastmath::max(row);
    (max, fastmath::sum_exp(row, max).ln())
}

simd_kernel! {
/// `-log softmax(row)[target]` of each row into `out`.
fn row_losses(x: &[f32], targets: &[u32], v: usize, out: &mut [f64]) {
    for ((row, &tg), o) in x.chunks_exact(v).zip(targets).zip(out) {
        let (max, lse) = log_softmax_row(row);
        *o = (lse - (row[tg as usize] - max)) as f64;
    }
}
}

/// Rows per parallel block: GPT-2's 50304-wide rows are worth spreading over the rank's
/// threads; each row's result does not depend on the split.
const ROWS: usize = 8;

/// The mean loss: rows in parallel, their losses added in row order (the same bits for
/// any thread count).
fn mean_loss(x: &[f32], targets: &[u32], v: usize) -> f64 {
    let mut losses = vec![0f64; targets.len()];
    if crate::ops::cpu::gemm::threads() > 1 && targets.len() > ROWS {
        use rayon::prelude::*;
        losses
            .par_chunks_mut(ROWS)
            .zip(x.par_chunks(ROWS * v))
            .zip(targets.par_chunks(ROWS))
            .for_each(|((o, x), t)| row_losses(x, t, v, o));
    } else {
        row_losses(x, targets, v, &mut losses);
    }
    losses.iter().sum::<f64>() / targets.len() as f64
}

simd_kernel! {
/// `dx = (softmax(row) - onehot(target)) * scale`, row by row.
fn loss_grad(x: &[f32], targets: &[u32], v: usize, scale: f32, dx: &mut [f32]) {
    for ((row, d), &tg) in x.chunks_exact(v).zip(dx.chunks_exact_mut(v)).zip(targets) {
        let (max, lse) = log_softmax_row(row);
        for (d, &r) in d.iter_mut().zip(row) {
            *d = fastmath::exp(r - max - lse) * scale;
        }
        d[tg as usize] -= scale;
    }
}
}

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "fused-cross-entropy"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s1, l1)?;
        let CpuStorage::U32(t) = s2 else {
            candle_core::bail!("cross-entropy targets must be u32");
        };
        let t = &t[l2.start_offset()..l2.start_offset() + l2.shape().elem_count()];
        let &[_, v] = l1.dims() else {
            candle_core::bail!("cross-entropy: logits must be (N, V), got {:?}", l1.dims());
        };
        let mean = timed(OpKind::CrossEntropy, 0.0, || mean_loss(x, t, v));
        Ok((CpuStorage::F32(vec![mean as f32]), Shape::from(())))
    }
    fn bwd(
        &self,
        x: &Tensor,
        tgt: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let g = grad.to_scalar::<f32>()?;
        let targets = tgt.flatten_all()?.to_vec1::<u32>()?;
        let v = x.dim(candle_core::D::Minus1)?;
        let scale = g / targets.len() as f32;
        let dx = with_f32(x, |x| {
            timed(OpKind::CrossEntropy, 0.0, || {
                let mut dx = vec![0f32; x.len()];
                if crate::ops::cpu::gemm::threads() > 1 && targets.len() > ROWS {
                    use rayon::prelude::*;
                    dx.par_chunks_mut(ROWS * v)
                        .zip(x.par_chunks(ROWS * v))
                        .zip(targets.par_chunks(ROWS))
                        .for_each(|((d, x), t)| loss_grad(x, t, v, scale, d));
                } else {
                    loss_grad(x, &targets, v, scale, &mut dx);
                }
                dx
            })
        })?;
        Ok((Some(Tensor::from_vec(dx, x.shape(), x.device())?), None))
    }
}

pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, CrossEntropy)
}
