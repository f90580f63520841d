//! LayerNorm without bias over the last dimension: `(x - mean) / sqrt(var + eps) * w`.
//! The backward recomputes the row statistics instead of keeping them.

use super::storage::{for_row_blocks, slice_of, with_f32};
use crate::ops::cpu::fastmath;
use crate::ops::cpu::simd::simd_kernel;
use crate::ops::profile::{timed, OpKind};
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

struct LayerNorm {
    eps: f32,
}

/// Mean and 1 / std of a row.
#[inline(always)]
fn row_stats(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = fastmath::sum(row) / n;
    let mut acc = [0f32; 16];
    let chunks = row.chunks_exact(16);
    let rest: f32 = chunks
        .remainder()
        .iter()
        .map(|v| (v - mean) * (v - mean))
        .sum();
    for c in chunks {
        for i in 0..16 {
            acc[i] += (c[i] - mean) * (c[i] - mean);
        }
    }
    let var = (acc.iter().sum::<f32>() + rest) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

simd_kernel! {
/// `dx` of a block of rows; adds the rows' contribution to `dw`.
fn backward_rows(x: &[f32], dy: &[f32], w: &[f32], eps: f32, dx: &mut [f32], dw: &mut [f32]) {
    let c = w.len();
    let mut xhat = vec![0f32; c];
    let mut g = vec![0f32; c];
    for ((row, dyr), dxr) in x
        .chunks_exact(c)
        .zip(dy.chunks_exact(c))
        .zip(dx.chunks_exact_mut(c))
    {
        let (mean, rstd) = row_stats(row, eps);
        for i in 0..c {
            xhat[i] = (row[i] - mean) * rstd;
            g[i] = dyr[i] * w[i];
            dw[i] += dyr[i] * xhat[i];
        }
        let m1 = fastmath::sum(&g) / c as f32;
        let m2 = fastmath::dot(&g, &xhat) / c as f32;
        for i in 0..c {
            dxr[i] = rstd * (g[i] - m1 - xhat[i] * m2);
        }
    }
}
}

simd_kernel! {
/// Normalised rows of `x` (a block of whole rows) into `out`.
fn forward_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let c = w.len();
    for (row, o) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)) {
        let (mean, rstd) = row_stats(row, eps);
        for ((o, &v), &g) in o.iter_mut().zip(row).zip(w) {
            *o = (v - mean) * rstd * g;
        }
    }
}
}

impl CustomOp2 for LayerNorm {
    fn name(&self) -> &'static str {
        "fused-layer-norm"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (slice_of(s1, l1)?, slice_of(s2, l2)?);
        let c = w.len();
        let out = timed(OpKind::LayernormFwd, 0.0, || {
            let mut out = vec![0f32; x.len()];
            for_row_blocks(&mut out, c, |first, o| {
                forward_rows(&x[first * c..first * c + o.len()], w, self.eps, o)
            });
            out
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let c = w.elem_count();
        let eps = self.eps;
        let (dx, dw) = with_f32(x, |x| {
            with_f32(w, |w| {
                with_f32(grad, |dy| {
                    timed(OpKind::LayernormBwd, 0.0, || {
                        let mut dx = vec![0f32; x.len()];
                        let rows = x.len() / c;
                        let threads = crate::ops::cpu::gemm::threads();
                        if threads <= 1 || rows < 2 {
                            let mut dw = vec![0f32; c];
                            backward_rows(x, dy, w, eps, &mut dx, &mut dw);
                            return (dx, dw);
                        }
                        // Each block of rows sums its own dw; the partial sums add up after.
                        let per = rows.div_ceil(threads * 4) * c;
                        let partial: Vec<Vec<f32>> = dx
                            .par_chunks_mut(per)
                            .enumerate()
                            .map(|(i, dxb)| {
                                let at = i * per;
                                let n = dxb.len();
                                let mut dw = vec![0f32; c];
                                backward_rows(
                                    &x[at..at + n],
                                    &dy[at..at + n],
                                    w,
                                    eps,
                                    dxb,
                                    &mut dw,
                                );
                                dw
                            })
                            .collect();
                        let mut dw = vec![0f32; c];
                        for p in &partial {
                            dw.iter_mut().zip(p).for_each(|(a, b)| *a += b);
                        }
                        (dx, dw)
                    })
                })
            })
        })???;
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), x.device())?),
            Some(Tensor::from_vec(dw, w.shape(), w.device())?),
        ))
    }
}

pub fn layer_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, LayerNorm { eps: eps as f32 })
}
