//! LayerNorm on a GPU (`kernels/layer_norm.cu`): `x (.., C)` in f32 or bf16 with an f32
//! weight and, if the model has one, an f32 bias, normalised in f32 and returned in x's
//! dtype. One kernel forward, three backward (dx; dw and db as per-warp partial sums,
//! then their fixed-order sum), where the portable path runs ~35 candle ops over an f32
//! copy. `tests/gpu.rs` holds it to the portable path.

use super::{
    by_dtype, cpu_fwd_gpu_only, instance, launch, rows_of, view, warp_rows, Arg, LAYER_NORM,
};
use crate::device::{cuda_path_on, CudaPath};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::DeviceRepr;
use candle_core::cuda_backend::CudaDType;
use candle_core::{
    CudaDevice, CudaStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType,
};

/// The op, as errors name it.
const OP: &str = "the CUDA layer norm";

/// Rows a warp sums into its partial `dw`: GPT-2's 8192 rows give 2048 partial rows, 16
/// warps for each of an H100's 132 multiprocessors. At 32 (256 warps, two a
/// multiprocessor) the partials took 0.39 ms a norm, 9.7 ms of GPT-2's 77 ms bf16 step on
/// the first H200 run (2026-11-28): each warp's rows are a chain of dependent passes, so
/// the kernel needs many warps in flight to hide memory latency.
const ROWS_PER_WARP: usize = 4;

struct LayerNorm {
    eps: f32,
}

fn forward<T: CudaDType + DeviceRepr + WithDType>(
    eps: f32,
    (x, lx): Arg,
    (w, lw): Arg,
    b: Option<Arg>,
) -> Result<CudaStorage> {
    let (n, c) = rows_of(lx, OP)?;
    let dev = x.device().clone();
    let (xv, wv) = (view::<T>(x, lx)?, view::<f32>(w, lw)?);
    // Without a bias the kernel is given the weight, which it does not read as one.
    let bv = match b {
        Some((b, lb)) => view::<f32>(b, lb)?,
        None => view::<f32>(w, lw)?,
    };
    let has_bias = i32::from(b.is_some());
    // SAFETY: the kernel writes every element of y.
    let y = unsafe { dev.alloc::<T>(n * c)? };
    let (n64, ci) = (n as i64, c as i32);
    let name = instance("ln_fwd", T::DTYPE)?;
    // SAFETY: the arguments match ln_fwd_* in kernels/layer_norm.cu; x and y hold n x C,
    // w and b C each (checked by `layer_norm`).
    unsafe {
        launch!(dev, LAYER_NORM, name, warp_rows(n); &xv, &wv, &bv, &has_bias, &y, &n64, &ci, &eps)
    }?;
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

impl CustomOp2 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm-cuda"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        w: &CudaStorage,
        lw: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let y = by_dtype!(OP, x.dtype(), forward(self.eps, (x, lx), (w, lw), None))?;
        Ok((y, lx.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.grads(x, w, dy)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl LayerNorm {
    /// `dx`, `dw` and `db` (the last two f32, from one pair of kernels).
    fn grads(&self, x: &Tensor, w: &Tensor, dy: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let dy = dy.contiguous()?.to_dtype(x.dtype())?;
        let dx = x.apply_op3_no_bwd(w, &dy, &LayerNormDx { eps: self.eps })?;
        let dwdb = x.apply_op2_no_bwd(&dy, &LayerNormDw { eps: self.eps })?;
        Ok((dx, dwdb.get(0)?, dwdb.get(1)?))
    }
}

/// With a bias: `(x, w, b)`.
impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm-bias-cuda"
    }
    cpu_fwd_gpu_only!(OP, 3);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        w: &CudaStorage,
        lw: &Layout,
        b: &CudaStorage,
        lb: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let y = by_dtype!(
            OP,
            x.dtype(),
            forward(self.eps, (x, lx), (w, lw), Some((b, lb)))
        )?;
        Ok((y, lx.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = self.grads(x, w, dy)?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// `dx` from `(x, w, dy)`.
struct LayerNormDx {
    eps: f32,
}

fn dx<T: CudaDType + DeviceRepr + WithDType>(
    eps: f32,
    (x, lx): Arg,
    (w, lw): Arg,
    (dy, ldy): Arg,
) -> Result<CudaStorage> {
    let (n, c) = rows_of(lx, OP)?;
    let dev = x.device().clone();
    let (xv, wv, gv) = (view::<T>(x, lx)?, view::<f32>(w, lw)?, view::<T>(dy, ldy)?);
    // SAFETY: the kernel writes every element of dx.
    let out = unsafe { dev.alloc::<T>(n * c)? };
    let (n64, ci) = (n as i64, c as i32);
    let name = instance("ln_dx", T::DTYPE)?;
    // SAFETY: the arguments match ln_dx_* in kernels/layer_norm.cu; x, dy and dx hold
    // n x C (dy is the forward's output gradient), w C.
    unsafe { launch!(dev, LAYER_NORM, name, warp_rows(n); &xv, &wv, &gv, &out, &n64, &ci, &eps) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

impl CustomOp3 for LayerNormDx {
    fn name(&self) -> &'static str {
        "layer-norm-cuda-dx"
    }
    cpu_fwd_gpu_only!(OP, 3);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        w: &CudaStorage,
        lw: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let out = by_dtype!(OP, x.dtype(), dx(self.eps, (x, lx), (w, lw), (dy, ldy)))?;
        Ok((out, lx.shape().clone()))
    }
}

/// `(2, C)` f32 from `(x, dy)`: `dw` and `db`.
struct LayerNormDw {
    eps: f32,
}

fn dw<T: CudaDType + DeviceRepr + WithDType>(
    eps: f32,
    dev: &CudaDevice,
    (x, lx): Arg,
    (dy, ldy): Arg,
) -> Result<CudaStorage> {
    let (n, c) = rows_of(lx, OP)?;
    let (xv, gv) = (view::<T>(x, lx)?, view::<T>(dy, ldy)?);
    let partials = n.div_ceil(ROWS_PER_WARP).max(1);
    // SAFETY: the partial kernel writes every row of `partial` (one a warp, each warp's
    // first rows existing since partials = ceil(n / ROWS_PER_WARP)), the reduction every
    // element of out (dw, then db).
    let partial = unsafe { dev.alloc::<f32>(partials * 2 * c)? };
    let out = unsafe { dev.alloc::<f32>(2 * c)? };
    let (n64, ci, rpw, cols) = (n as i64, c as i32, ROWS_PER_WARP as i32, 2 * c as i32);
    let in_registers = i32::from(cuda_path_on(CudaPath::LnRegisterSums));
    let name = instance("ln_dw_partial", T::DTYPE)?;
    // SAFETY: the arguments match ln_dw_partial_* in kernels/layer_norm.cu; x and dy hold
    // n x C, partial `partials` rows of 2C.
    unsafe {
        launch!(dev, LAYER_NORM, name, warp_rows(partials);
            &xv, &gv, &partial, &n64, &ci, &eps, &rpw, &in_registers)
    }?;
    let p64 = partials as i64;
    // SAFETY: the arguments match ln_dw_reduce; partial holds `partials` rows of 2C, out
    // 2C. On the same stream, it runs after the partials.
    unsafe {
        launch!(dev, LAYER_NORM, "ln_dw_reduce", warp_rows(2 * c); &partial, &out, &p64, &cols)
    }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

impl CustomOp2 for LayerNormDw {
    fn name(&self) -> &'static str {
        "layer-norm-cuda-dw"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (_, c) = rows_of(lx, OP)?;
        let dev = x.device().clone();
        let out = by_dtype!(OP, x.dtype(), dw(self.eps, &dev, (x, lx), (dy, ldy)))?;
        Ok((out, Shape::from((2, c))))
    }
}

/// LayerNorm of `x (.., C)` (f32 or bf16, on the GPU) with the f32 weight `w (C,)` and
/// bias `b (C,)` if any, in x's dtype.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let c = x.dim(candle_core::D::Minus1)?;
    if [Some(w), b]
        .into_iter()
        .flatten()
        .any(|t| t.dtype() != DType::F32 || t.dims() != [c])
    {
        candle_core::bail!("the CUDA layer norm takes an f32 weight and bias of the row's length");
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let op = LayerNorm { eps: eps as f32 };
    match b {
        Some(b) => x.apply_op3(&w, &b.contiguous()?, op),
        None => x.apply_op2(&w, op),
    }
}
