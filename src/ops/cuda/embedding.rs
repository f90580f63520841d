//! The token embedding's lookup on a GPU (`kernels/embedding.cu`): rows of a `(V, C)`
//! table (f32 or bf16) by u32 ids, and a backward that gives each table row one warp
//! scanning the ids (or, where they fit one block's sort, only its own bucket of them),
//! where candle's `index_add` walks all ids in one thread a column after zero-filling and
//! copying the table's whole gradient. The same additions in the same order: the same
//! bits. `tests/gpu.rs` checks it through the models' gradients, `tests/gpu/kernels.rs`
//! both paths against each other.

use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, view, warp_rows, Arg, EMBEDDING};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig};
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
        Ok((Some(table_grad(ids, &dy, rows, GradPath::Auto)?), None))
    }
}

/// How the table's gradient finds each row's positions: by scanning every id (any
/// size), or from the ids bucketed by one block's sort first (where they fit it: at most
/// [`SORT_N`] ids and `V n < 2^32 - 1`); `Auto` takes the second where it can. Both give
/// the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradPath {
    Auto,
    Scan,
    Bucketed,
}

/// Ids the bucketing sort takes (`SORT_N` in kernels/embedding.cu).
pub const SORT_N: usize = 8192;

/// Columns one warp of the bucketed backward takes (`SORTED_WARP_COLUMNS` in
/// kernels/embedding.cu).
const SORTED_WARP_COLUMNS: usize = 256;

/// Whether `n` ids of a table of `v` rows fit the bucketing sort.
fn bucketable(n: usize, v: usize) -> bool {
    n <= SORT_N && (v as u64) * (n as u64) < u32::MAX as u64
}

/// The gradient `(rows, C)` of a table from the ids `(N,)` and the lookup's output
/// gradient `dy (N, C)` (contiguous, the table's dtype), by `path`.
pub fn table_grad(ids: &Tensor, dy: &Tensor, rows: usize, path: GradPath) -> Result<Tensor> {
    let bucketed = match path {
        GradPath::Auto => {
            bucketable(ids.elem_count(), rows)
                && crate::device::cuda_path_on(crate::device::CudaPath::EmbeddingBuckets)
        }
        GradPath::Scan => false,
        GradPath::Bucketed => true,
    };
    ids.contiguous()?
        .apply_op2_no_bwd(&dy.contiguous()?, &EmbeddingGrad { rows, bucketed })
}

/// The table's gradient `(rows, C)` from `(ids, dy)`.
struct EmbeddingGrad {
    rows: usize,
    bucketed: bool,
}

fn grad<T: CudaDType + DeviceRepr + WithDType>(
    v: usize,
    bucketed: bool,
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
    if bucketed {
        if !bucketable(n, v) {
            candle_core::bail!(
                "embedding backward: {n} ids of a {v}-row table do not fit the bucketing sort"
            );
        }
        let (n32, v32) = (n as u32, v as u32);
        // SAFETY: the sort writes all n keys.
        let keys = unsafe { dev.alloc::<u32>(n.max(1))? };
        let one_block = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match emb_sort_ids in kernels/embedding.cu; the ids hold
        // n <= SORT_N (checked above), keys n.
        unsafe { launch!(dev, EMBEDDING, "emb_sort_ids", one_block; &iv, &keys, &n32, &v32) }?;
        let name = instance("emb_bwd_sorted", T::DTYPE)?;
        // One warp a row's SORTED_WARP_COLUMNS (kernels/embedding.cu) columns.
        let warps = v * c.div_ceil(SORTED_WARP_COLUMNS);
        // SAFETY: the arguments match emb_bwd_sorted_*; keys hold n sorted keys (the
        // launch before, on the same stream), dy n x C, out V x C.
        unsafe {
            launch!(dev, EMBEDDING, name, warp_rows(warps); &keys, &gv, &out, &n32, &ci, &v64)
        }?;
        return Ok(CudaStorage::wrap_cuda_slice(out, dev));
    }
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
        let out = by_dtype!(
            OP,
            dy.dtype(),
            grad(self.rows, self.bucketed, (ids, li), (dy, ld))
        )?;
        Ok((out, Shape::from((self.rows, c))))
    }
}

/// Rows `ids (N,)` (u32) of `table (V, C)` (f32 or bf16, on the GPU): `(N, C)`.
pub fn embedding(table: &Tensor, ids: &Tensor) -> Result<Tensor> {
    table.contiguous()?.apply_op2(&ids.contiguous()?, Embedding)
}
