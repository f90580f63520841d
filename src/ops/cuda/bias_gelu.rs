//! The MLP's bias add and GELU in one kernel each way (`bias_gelu_*` in
//! `kernels/gelu.cu`): `y = gelu(x + b)` with the f32 master bias added in f32 and
//! rounded to x's dtype as `cuda::bias` stores it, so the same bits as that kernel then
//! `cuda::gelu`, with one pass over the `(B, T, 4C)` activation fewer each way. The
//! backward recomputes `x + b`: `du = dy gelu'(x + b)`, and the bias's gradient is the
//! column sums of `du` (`cuda::bias`). `tests/gpu/kernels.rs` holds it to the two ops
//! bit for bit.

use super::bias::{bias_grad, columns_by_rows};
use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, rows_of, view, Arg, GELU};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::DeviceRepr;
use candle_core::cuda_backend::CudaDType;
use candle_core::WithDType;
use candle_core::{CudaStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};

/// The op, as errors name it.
const OP: &str = "the CUDA bias + GELU";

/// `(x, b) -> gelu(x + b)`.
struct BiasGelu {
    tanh: bool,
}

/// Checks `b` is the f32 bias of x's rows; their count and length.
fn sizes(lx: &Layout, b: &CudaStorage, lb: &Layout) -> Result<(usize, usize)> {
    let (n, c) = rows_of(lx, OP)?;
    if b.dtype() != DType::F32 || lb.dims() != [c] {
        candle_core::bail!(
            "{OP} takes an f32 bias of the row's length {c}, got {:?} {:?}",
            b.dtype(),
            lb.dims()
        );
    }
    Ok((n, c))
}

fn forward<T: CudaDType + DeviceRepr + WithDType>(
    tanh: bool,
    (x, lx): Arg,
    (b, lb): Arg,
) -> Result<CudaStorage> {
    let (n, c) = sizes(lx, b, lb)?;
    let dev = x.device().clone();
    let (xv, bv) = (view::<T>(x, lx)?, view::<f32>(b, lb)?);
    // SAFETY: the kernel writes every element of y (each column's thread strides over
    // every row).
    let y = unsafe { dev.alloc::<T>(n * c)? };
    let (n64, c64, form) = (n as i64, c as i64, i32::from(tanh));
    let name = instance("bias_gelu_fwd", T::DTYPE)?;
    // SAFETY: the arguments match bias_gelu_fwd_* in kernels/gelu.cu; x and y hold n x C,
    // b C (checked by `sizes`).
    unsafe { launch!(dev, GELU, name, columns_by_rows(c, n); &xv, &bv, &y, &n64, &c64, &form) }?;
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

impl CustomOp2 for BiasGelu {
    fn name(&self) -> &'static str {
        "bias-gelu-cuda"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        b: &CudaStorage,
        lb: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let y = by_dtype!(OP, x.dtype(), forward(self.tanh, (x, lx), (b, lb)))?;
        Ok((y, lx.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = dy.contiguous()?.to_dtype(x.dtype())?;
        let du = x.apply_op3_no_bwd(b, &dy, &BiasGeluGrad { tanh: self.tanh })?;
        let db = bias_grad(&du)?;
        Ok((Some(du), Some(db)))
    }
}

/// `(x, b, dy) -> du = dy gelu'(x + b)`.
struct BiasGeluGrad {
    tanh: bool,
}

fn backward<T: CudaDType + DeviceRepr + WithDType>(
    tanh: bool,
    (x, lx): Arg,
    (b, lb): Arg,
    (dy, ldy): Arg,
) -> Result<CudaStorage> {
    let (n, c) = sizes(lx, b, lb)?;
    if lx.shape() != ldy.shape() {
        candle_core::bail!(
            "{OP} backward: x {:?} and dy {:?} differ",
            lx.dims(),
            ldy.dims()
        );
    }
    let dev = x.device().clone();
    let (xv, bv, gv) = (view::<T>(x, lx)?, view::<f32>(b, lb)?, view::<T>(dy, ldy)?);
    // SAFETY: the kernel writes every element of du.
    let du = unsafe { dev.alloc::<T>(n * c)? };
    let (n64, c64, form) = (n as i64, c as i64, i32::from(tanh));
    let name = instance("bias_gelu_bwd", T::DTYPE)?;
    // SAFETY: the arguments match bias_gelu_bwd_* in kernels/gelu.cu; x, dy and du hold
    // n x C (checked above), b C.
    unsafe {
        launch!(dev, GELU, name, columns_by_rows(c, n); &xv, &bv, &gv, &du, &n64, &c64, &form)
    }?;
    Ok(CudaStorage::wrap_cuda_slice(du, dev))
}

impl CustomOp3 for BiasGeluGrad {
    fn name(&self) -> &'static str {
        "bias-gelu-cuda-grad"
    }
    cpu_fwd_gpu_only!(OP, 3);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        b: &CudaStorage,
        lb: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let du = by_dtype!(
            OP,
            x.dtype(),
            backward(self.tanh, (x, lx), (b, lb), (dy, ldy))
        )?;
        Ok((du, lx.shape().clone()))
    }
}

/// `gelu(x + b)` of `x (.., C)` (f32 or bf16, on the GPU) and the f32 bias `b (C,)`: the
/// tanh form where `tanh`, else the exact one; b's gradient comes back in f32.
pub fn bias_gelu(x: &Tensor, b: &Tensor, tanh: bool) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&b.contiguous()?, BiasGelu { tanh })
}
