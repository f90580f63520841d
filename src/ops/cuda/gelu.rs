//! GELU on a GPU (`kernels/gelu.cu`), exact or tanh form, f32 or bf16 (computed in f32):
//! one kernel forward and one backward, where the portable path's backward runs ~10
//! candle ops over the `(B, T, 4C)` activation. `tests/gpu.rs` holds it to the portable
//! path.

use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, view, Arg, GELU};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::CudaDType;
use candle_core::{CudaStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor, WithDType};

/// The op, as errors name it.
const OP: &str = "the CUDA GELU";

/// Threads a block; blocks at most this many (a grid-stride loop covers the rest).
const THREADS: usize = 256;
const MAX_BLOCKS: usize = 1 << 20;

fn config(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(THREADS).clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

struct Gelu {
    tanh: bool,
}

fn forward<T: CudaDType + DeviceRepr + WithDType>(
    tanh: bool,
    x: &CudaStorage,
    lx: &Layout,
) -> Result<CudaStorage> {
    let n = lx.shape().elem_count();
    let dev = x.device().clone();
    let xv = view::<T>(x, lx)?;
    // SAFETY: the kernel writes every element of y.
    let y = unsafe { dev.alloc::<T>(n)? };
    let (n64, form) = (n as i64, i32::from(tanh));
    let name = instance("gelu_fwd", T::DTYPE)?;
    // SAFETY: the arguments match gelu_fwd_* in kernels/gelu.cu; x and y hold n each.
    unsafe { launch!(dev, GELU, name, config(n); &xv, &y, &n64, &form) }?;
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-cuda"
    }
    cpu_fwd_gpu_only!(OP, 1);
    fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout) -> Result<(CudaStorage, Shape)> {
        let y = by_dtype!(OP, x.dtype(), forward(self.tanh, x, lx))?;
        Ok((y, lx.shape().clone()))
    }
    fn bwd(&self, x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let dy = dy.contiguous()?.to_dtype(x.dtype())?;
        Ok(Some(
            x.apply_op2_no_bwd(&dy, &GeluGrad { tanh: self.tanh })?,
        ))
    }
}

/// `dx = dy * gelu'(x)` from `(x, dy)`.
struct GeluGrad {
    tanh: bool,
}

fn backward<T: CudaDType + DeviceRepr + WithDType>(
    tanh: bool,
    (x, lx): Arg,
    (dy, ldy): Arg,
) -> Result<CudaStorage> {
    let n = lx.shape().elem_count();
    let dev = x.device().clone();
    let (xv, gv) = (view::<T>(x, lx)?, view::<T>(dy, ldy)?);
    // SAFETY: the kernel writes every element of dx.
    let dx = unsafe { dev.alloc::<T>(n)? };
    let (n64, form) = (n as i64, i32::from(tanh));
    let name = instance("gelu_bwd", T::DTYPE)?;
    // SAFETY: the arguments match gelu_bwd_* in kernels/gelu.cu; x, dy (same shape,
    // checked by the caller) and dx hold n each.
    unsafe { launch!(dev, GELU, name, config(n); &xv, &gv, &dx, &n64, &form) }?;
    Ok(CudaStorage::wrap_cuda_slice(dx, dev))
}

impl CustomOp2 for GeluGrad {
    fn name(&self) -> &'static str {
        "gelu-cuda-grad"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if lx.shape() != ldy.shape() {
            candle_core::bail!(
                "gelu backward: x {:?} and dy {:?} differ",
                lx.dims(),
                ldy.dims()
            );
        }
        let dx = by_dtype!(OP, x.dtype(), backward(self.tanh, (x, lx), (dy, ldy)))?;
        Ok((dx, lx.shape().clone()))
    }
}

/// GELU of `x` (f32 or bf16, on the GPU): the tanh form where `tanh`, else the exact one.
pub fn gelu(x: &Tensor, tanh: bool) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu { tanh })
}
