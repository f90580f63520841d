//! The token embedding's lookup on a GPU (`kernels/embedding.cu`): rows of a `(V, C)`
//! table (f32 or bf16) by u32 ids, and a backward that gives each table row one warp
//! scanning the ids, where candle's `index_add` walks all ids in one thread a column
//! after zero-filling and copying the table's whole gradient. The same additions in the
//! same order: the same bits. `tests/gpu.rs` checks it through the models' gradients.

use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, view, warp_rows, Arg, EMBEDDING};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::DeviceRepr;
use candle_core::cuda_backend::CudaDType;
use candle_core::{CudaStorage, CustomOp2, DType, Layout, Result, Shape, Tensor, WithDType};

/// The op, as errors name it.
const OP: &str = "the CUDA embedding";

/// `(V, C)` of a table, `n` of ids.
fn sizes(table: &Layout, ids: &Layout) -> Result<(usize, usize, usize)> {
    match (table.dims(), ids.dims()) {
        (&[v, c], &[n]) if v <= u32::MAX as usize && c > 0 => Ok((v, c, n)),
        (t, i) => {
            candle_core::bail!("embedding takes a table (V, C) and ids (N,), got {t:?} and {i:?}")
        }
    }
}

struct Embedding;

fn lookup<T: CudaDType + DeviceRepr + WithDType>(
    (t, lt): Arg,
    (ids, li): Arg,
) -> Result<CudaStorage> {
    let (v, c, n) = sizes(lt, li)?;
    let dev = t.device().clone();
    let (tv, iv) = (view::<T>(t, lt)?, view::<u32>(ids, li)?);
    // SAFETY: the kernel writes every element of out.
    let out = unsafe { dev.alloc::<T>(n * c)? };
    let (n64, ci, v64) = (n as i64, c as i32, v as i64);
    let name = instance("emb_fwd", T::DTYPE)?;
    // SAFETY: the arguments match emb_fwd_* in kernels/embedding.cu; the table holds
    // V x C (ids outside it are not read), the ids n, out n x C.
    unsafe { launch!(dev, EMBEDDING, name, warp_rows(n); &tv, &iv, &out, &n64, &ci, &v64) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

impl CustomOp2 for Embedding {
    fn name(&self) -> &'static str {
        "embedding-cuda"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        t: &CudaStorage,
        lt: &Layout,
        ids: &CudaStorage,
        li: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if ids.dtype() != DType::U32 {
            candle_core::bail!("embedding ids must be u32, got {:?}", ids.dtype());
        }
        let (_, c, n) = sizes(lt, li)?;
        Ok((
            by_dtype!(OP, t.dtype(), lookup((t, lt), (ids, li)))?,
            Shape::from((n, c)),
        ))
    }
    fn bwd(
        &self,
        table: &Tensor,
        ids: &Tensor,
        _: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = dy.contiguous()?.to_dtype(table.dtype())?;
        let rows = table.dim(0)?;
        Ok((
            Some(ids.apply_op2_no_bwd(&dy, &EmbeddingGrad { rows })?),
            None,
        ))
    }
}

/// The table's gradient `(rows, C)` from `(ids, dy)`.
struct EmbeddingGrad {
    rows: usize,
}

fn grad<T: CudaDType + DeviceRepr + WithDType>(
    v: usize,
    (ids, li): Arg,
    (dy, ld): Arg,
) -> Result<CudaStorage> {
    let (n, c) = ld.shape().dims2()?;
    if li.shape().elem_count() != n {
        candle_core::bail!(
            "embedding backward: {} ids for {n} gradient rows",
            li.shape().elem_count()
        );
    }
    let dev = dy.device().clone();
    let (iv, gv) = (view::<u32>(ids, li)?, view::<T>(dy, ld)?);
    // SAFETY: the kernel writes every element of the table's gradient (rows without a
    // match as 0).
    let out = unsafe { dev.alloc::<T>(v * c)? };
    let (n64, ci, v64) = (n as i64, c as i32, v as i64);
    let name = instance("emb_bwd", T::DTYPE)?;
    // SAFETY: the arguments match emb_bwd_* in kernels/embedding.cu; the ids hold n
    // (checked above), dy n x C, out V x C.
    unsafe { launch!(dev, EMBEDDING, name, warp_rows(v); &iv, &gv, &out, &n64, &ci, &v64) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

impl CustomOp2 for EmbeddingGrad {
    fn name(&self) -> &'static str {
        "embedding-cuda-grad"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        ids: &CudaStorage,
        li: &Layout,
        dy: &CudaStorage,
        ld: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (_, c) = ld.shape().dims2()?;
        let out = by_dtype!(OP, dy.dtype(), grad(self.rows, (ids, li), (dy, ld)))?;
        Ok((out, Shape::from((self.rows, c))))
    }
}

/// Rows `ids (N,)` (u32) of `table (V, C)` (f32 or bf16, on the GPU): `(N, C)`.
pub fn embedding(table: &Tensor, ids: &Tensor) -> Result<Tensor> {
    table.contiguous()?.apply_op2(&ids.contiguous()?, Embedding)
}
