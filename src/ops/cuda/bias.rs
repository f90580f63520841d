//! A linear layer's bias on a GPU (`kernels/bias.cu`): `x (.., C)` in f32 or bf16 plus the
//! f32 master bias `b (C,)`, added in f32 and rounded once to x's dtype; the backward
//! passes `dy` through to x and sums its columns in f32 for `b` (partial sums over fixed
//! row ranges, then added in order: no atomics). Where the portable path casts the bias,
//! broadcast-adds it with a strided index per element and sums the gradient one block a
//! column. `tests/gpu.rs` holds it to candle's broadcast add on the same values in f32,
//! rounded once: bit for bit (the bias gradient to 1e-5).

use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, rows_of, view, warp_rows, Arg, BIAS};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::CudaDType;
use candle_core::{
    CudaStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor, WithDType,
};

/// The op, as errors name it.
const OP: &str = "the CUDA bias add";

/// Threads a block, one a column.
const THREADS: usize = 256;
/// The grid's y extent at most (CUDA's limit); more rows take a stride.
const MAX_GRID_Y: usize = 65_535;
/// Rows summed into one partial row of the bias gradient, at least: GPT-2's 8192 rows
/// give 256 partial rows.
const ROWS_PER_PARTIAL: usize = 32;

/// One thread a column (`THREADS` a block) over `rows` rows of the grid's y.
pub(super) fn columns_by_rows(c: usize, rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            c.div_ceil(THREADS) as u32,
            rows.clamp(1, MAX_GRID_Y) as u32,
            1,
        ),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

struct BiasAdd;

fn forward<T: CudaDType + DeviceRepr + WithDType>(
    (x, lx): Arg,
    (b, lb): Arg,
) -> Result<CudaStorage> {
    let (n, c) = rows_of(lx, OP)?;
    let dev = x.device().clone();
    let (xv, bv) = (view::<T>(x, lx)?, view::<f32>(b, lb)?);
    // SAFETY: the kernel writes every element of y (each column's thread strides over
    // every row).
    let y = unsafe { dev.alloc::<T>(n * c)? };
    let (n64, c64) = (n as i64, c as i64);
    let name = instance("bias_fwd", T::DTYPE)?;
    // SAFETY: the arguments match bias_fwd_* in kernels/bias.cu; x and y hold n x C, b C.
    unsafe { launch!(dev, BIAS, name, columns_by_rows(c, n); &xv, &bv, &y, &n64, &c64) }?;
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

impl CustomOp2 for BiasAdd {
    fn name(&self) -> &'static str {
        "bias-add-cuda"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        b: &CudaStorage,
        lb: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (_, c) = rows_of(lx, OP)?;
        if b.dtype() != DType::F32 || lb.dims() != [c] {
            candle_core::bail!(
                "{OP} takes an f32 bias of the row's length {c}, got {:?} {:?}",
                b.dtype(),
                lb.dims()
            );
        }
        let y = by_dtype!(OP, x.dtype(), forward((x, lx), (b, lb)))?;
        Ok((y, lx.shape().clone()))
    }
    fn bwd(
        &self,
        _x: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(dy.clone()), Some(bias_grad(dy)?)))
    }
}

/// `db (C,)` f32: the column sums of `dy (.., C)`.
struct BiasGrad;

fn column_sums<T: CudaDType + DeviceRepr + WithDType>((dy, ldy): Arg) -> Result<CudaStorage> {
    let (n, c) = rows_of(ldy, OP)?;
    let dev = dy.device().clone();
    let gv = view::<T>(dy, ldy)?;
    // Enough rows a partial that the partials fit the grid's y.
    let rows = ROWS_PER_PARTIAL.max(n.div_ceil(MAX_GRID_Y));
    let partials = n.div_ceil(rows).max(1);
    // SAFETY: the partial kernel writes every element of `partial` (a thread for each
    // column of each of the `partials` row ranges, an empty range writing 0), the
    // reduction every element of db.
    let partial = unsafe { dev.alloc::<f32>(partials * c)? };
    let db = unsafe { dev.alloc::<f32>(c)? };
    let (n64, c64, rows32, p64) = (n as i64, c as i64, rows as i32, partials as i64);
    let name = instance("bias_partial", T::DTYPE)?;
    // SAFETY: the arguments match bias_partial_* in kernels/bias.cu; dy holds n x C,
    // partial `partials` rows of C.
    unsafe {
        launch!(dev, BIAS, name, columns_by_rows(c, partials); &gv, &partial, &n64, &c64, &rows32)
    }?;
    // SAFETY: the arguments match bias_reduce; partial holds `partials` rows of C, db C.
    // On the same stream, it runs after the partials.
    unsafe { launch!(dev, BIAS, "bias_reduce", warp_rows(c); &partial, &db, &p64, &c64) }?;
    Ok(CudaStorage::wrap_cuda_slice(db, dev))
}

impl CustomOp1 for BiasGrad {
    fn name(&self) -> &'static str {
        "bias-add-cuda-grad"
    }
    cpu_fwd_gpu_only!(OP, 1);
    fn cuda_fwd(&self, dy: &CudaStorage, ldy: &Layout) -> Result<(CudaStorage, Shape)> {
        let (_, c) = rows_of(ldy, OP)?;
        let db = by_dtype!(OP, dy.dtype(), column_sums((dy, ldy)))?;
        Ok((db, Shape::from(c)))
    }
}

/// The bias gradient `db (C,)` f32 of an output gradient `dy (.., C)`: its column sums.
pub(super) fn bias_grad(dy: &Tensor) -> Result<Tensor> {
    dy.contiguous()?.apply_op1_no_bwd(&BiasGrad)
}

/// `x (.., C)` (f32 or bf16, on the GPU) plus the f32 bias `b (C,)`, in x's dtype; b's
/// gradient comes back in f32.
pub fn bias_add(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&b.contiguous()?, BiasAdd)
}
