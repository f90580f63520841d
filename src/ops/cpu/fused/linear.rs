//! `y = x W (+ b)` for `x (rows, in)` and a weight of any 2-D strides (a transposed view
//! such as the tied head's `wte^T` is read in place). The backward multiplies by
//! transposed views too: `dx = dy W^T`, `dW = x^T dy`, `db` = column sums of `dy`.

use super::storage::slice_of;
use crate::ops::cpu::gemm::{matmul, matmul_new, threads, Mat, MatMut};
use crate::ops::profile::{timed, OpKind};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

/// `x @ W (+ b)`. With `w_out_in` the weight argument is stored `(out, in)` and used
/// transposed (the tied head multiplies by `wte^T`): its gradient then comes back in that
/// same `(out, in)` layout, with no transpose in the graph (whose backward would copy
/// the vocabulary-sized gradient across).
#[derive(Clone, Copy)]
struct Linear {
    w_out_in: bool,
}

impl Linear {
    /// The logical `W (in, out)` over the weight argument's storage.
    fn weight<'a>(&self, s: &'a CpuStorage, l: &Layout) -> Result<Mat<'a>> {
        let m = mat_of(s, l)?;
        Ok(if self.w_out_in { m.t() } else { m })
    }
}

/// A 2-D view of a tensor of any strides.
fn mat_of<'a>(s: &'a CpuStorage, l: &Layout) -> Result<Mat<'a>> {
    let CpuStorage::F32(d) = s else {
        candle_core::bail!("fused ops support f32 tensors only");
    };
    let (&[rows, cols], &[rs, cs]) = (l.dims(), l.stride()) else {
        candle_core::bail!("linear: the weight must be 2-D, got {:?}", l.dims());
    };
    Ok(Mat::strided(&d[l.start_offset()..], rows, cols, rs, cs))
}

fn forward(x: &CpuStorage, lx: &Layout, w: Mat, b: Option<&[f32]>) -> Result<(CpuStorage, Shape)> {
    let x = slice_of(x, lx)?;
    let (n_in, n_out) = (w.rows, w.cols);
    let rows = x.len() / n_in.max(1);
    if lx.dims().last() != Some(&n_in) {
        candle_core::bail!("linear: input {:?} does not end in {n_in}", lx.dims());
    }
    let flops = 2.0 * (rows * n_in * n_out) as f64;
    let y = timed(OpKind::MatmulFwd, flops, || {
        let x = Mat::rows(x, rows, n_in);
        let Some(b) = b else {
            return matmul_new(x, w, threads());
        };
        // Start from the bias and accumulate the product onto it.
        let mut y = b.repeat(rows);
        matmul(MatMut::rows(&mut y, rows, n_out), x, w, true, threads());
        y
    });
    let mut dims = lx.dims().to_vec();
    *dims.last_mut().expect("rank >= 1") = n_out;
    Ok((CpuStorage::F32(y), Shape::from(dims)))
}

/// Gradients of x, W and (when `with_bias`) b.
fn backward(
    op: Linear,
    x: &Tensor,
    w: &Tensor,
    grad: &Tensor,
    with_bias: bool,
) -> Result<(Tensor, Tensor, Option<Tensor>)> {
    let x = x.contiguous()?;
    let dy = grad.contiguous()?;
    let (n_in, n_out) = if op.w_out_in {
        let (o, i) = w.dims2()?;
        (i, o)
    } else {
        w.dims2()?
    };
    let rows = x.elem_count() / n_in.max(1);
    let (xs, xl) = x.storage_and_layout();
    let (ws, wl) = w.storage_and_layout();
    let (gs, gl) = dy.storage_and_layout();
    let (
        candle_core::Storage::Cpu(xs),
        candle_core::Storage::Cpu(ws),
        candle_core::Storage::Cpu(gs),
    ) = (&*xs, &*ws, &*gs)
    else {
        candle_core::bail!("fused ops run on the CPU only");
    };
    let (xv, wm, gv) = (slice_of(xs, xl)?, op.weight(ws, wl)?, slice_of(gs, gl)?);
    let flops = 4.0 * (rows * n_in * n_out) as f64;
    let (dx, dw, db) = timed(OpKind::MatmulBwd, flops, || {
        let g = Mat::rows(gv, rows, n_out);
        let dx = matmul_new(g, wm.t(), threads());
        // The weight's gradient in the weight argument's own layout.
        let x_rows = Mat::rows(xv, rows, n_in);
        let dw = if op.w_out_in {
            matmul_new(g.t(), x_rows, threads())
        } else {
            matmul_new(x_rows.t(), g, threads())
        };
        let db = with_bias.then(|| {
            let mut db = vec![0f32; n_out];
            for r in gv.chunks_exact(n_out) {
                db.iter_mut().zip(r).for_each(|(a, b)| *a += b);
            }
            db
        });
        (dx, dw, db)
    });
    let dev = x.device();
    let dw = if op.w_out_in {
        Tensor::from_vec(dw, (n_out, n_in), dev)?
    } else {
        Tensor::from_vec(dw, (n_in, n_out), dev)?
    };
    Ok((
        Tensor::from_vec(dx, x.shape(), dev)?,
        dw,
        db.map(|db| Tensor::from_vec(db, n_out, dev)).transpose()?,
    ))
}

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "fused-linear"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        forward(s1, l1, self.weight(s2, l2)?, None)
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = backward(*self, x, w, grad, false)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "fused-linear-bias"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let w = self.weight(s2, l2)?;
        let b = slice_of(s3, l3)?;
        if b.len() != w.cols {
            candle_core::bail!("linear: bias of {} for {} outputs", b.len(), w.cols);
        }
        forward(s1, l1, w, Some(b))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = backward(*self, x, w, grad, true)?;
        Ok((Some(dx), Some(dw), db))
    }
}

/// `x (.., in) @ w (in, out) + b` -> `(.., out)`.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    apply(x, w, b, Linear { w_out_in: false })
}

/// `x (.., in) @ w^T + b` for `w (out, in)` -> `(.., out)`.
pub fn linear_t(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    apply(x, w, b, Linear { w_out_in: true })
}

fn apply(x: &Tensor, w: &Tensor, b: Option<&Tensor>, op: Linear) -> Result<Tensor> {
    let x = x.contiguous()?;
    match b {
        Some(b) => x.apply_op3(w, &b.contiguous()?, op),
        None => x.apply_op2(w, op),
    }
}
