//! Cross-entropy on a GPU (`kernels/cross_entropy.cu`): each row's loss of `logits (N,
//! V)` (f32 or bf16, read as they are) against u32 targets, one thread block a row, and
//! its backward `(softmax - onehot) * g` in the logits' dtype, in one pass (each row's
//! log-sum-exp is its loss plus its target's logit); where the portable path
//! casts the logits to f32 and runs ~17 candle ops over them. The mean over rows stays a
//! candle op (its backward hands each row its `1 / N`). `tests/gpu.rs` holds it to the
//! portable path.

use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, view, Arg, CROSS_ENTROPY};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::CudaDType;
use candle_core::{
    CudaStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType,
};

/// The op, as errors name it.
const OP: &str = "the CUDA cross-entropy";

/// Threads a row: GPT-2's 50304 logits are ~200 a thread.
const THREADS: u32 = 256;

fn row_config(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn rows_of(l: &Layout) -> Result<(usize, usize)> {
    match l.dims() {
        &[n, v] if v > 0 && n <= u32::MAX as usize => Ok((n, v)),
        d => candle_core::bail!("cross-entropy takes logits (N, V), got {d:?}"),
    }
}

/// `(N,)` f32: each row's `-log softmax(x)[target]`.
struct RowLosses;

fn losses<T: CudaDType + DeviceRepr + WithDType>(
    (x, lx): Arg,
    (t, lt): Arg,
) -> Result<CudaStorage> {
    let (n, v) = rows_of(lx)?;
    let dev = x.device().clone();
    let (xv, tv) = (view::<T>(x, lx)?, view::<u32>(t, lt)?);
    // SAFETY: the kernel writes every row's loss.
    let out = unsafe { dev.alloc::<f32>(n)? };
    let v64 = v as i64;
    let name = instance("ce_fwd", T::DTYPE)?;
    // SAFETY: the arguments match ce_fwd_* in kernels/cross_entropy.cu; x holds n x V,
    // the targets and out n each (checked by the caller).
    unsafe { launch!(dev, CROSS_ENTROPY, name, row_config(n); &xv, &tv, &out, &v64) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

impl CustomOp2 for RowLosses {
    fn name(&self) -> &'static str {
        "cross-entropy-cuda"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        t: &CudaStorage,
        lt: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (n, _) = rows_of(lx)?;
        if lt.shape().elem_count() != n || t.dtype() != DType::U32 {
            candle_core::bail!("cross-entropy: targets must be u32, one a row");
        }
        Ok((
            by_dtype!(OP, x.dtype(), losses((x, lx), (t, lt)))?,
            Shape::from(n),
        ))
    }
    fn bwd(
        &self,
        x: &Tensor,
        t: &Tensor,
        losses: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // The rows' gradients and their losses, from which the backward recovers each
        // row's log-sum-exp (one pass over the logits instead of three).
        let g = g.to_dtype(DType::F32)?.flatten_all()?;
        let gl = Tensor::cat(&[&g, &losses.flatten_all()?], 0)?;
        Ok((Some(x.apply_op3_no_bwd(t, &gl, &RowLossesGrad)?), None))
    }
}

/// `dlogits` from `(logits, targets, [g (N,), losses (N,)])`.
struct RowLossesGrad;

fn grad<T: CudaDType + DeviceRepr + WithDType>(
    (x, lx): Arg,
    (t, lt): Arg,
    (g, lg): Arg,
) -> Result<CudaStorage> {
    let (n, v) = rows_of(lx)?;
    if lg.shape().elem_count() != 2 * n || lt.shape().elem_count() != n {
        candle_core::bail!(
            "cross-entropy backward: {n} rows need {n} targets and 2 x {n} gradients and losses"
        );
    }
    let dev = x.device().clone();
    let (xv, tv, gv) = (view::<T>(x, lx)?, view::<u32>(t, lt)?, view::<f32>(g, lg)?);
    // SAFETY: the kernel writes every element of dx.
    let out = unsafe { dev.alloc::<T>(n * v)? };
    let (v64, n64) = (v as i64, n as i64);
    if !crate::device::cuda_path_on(crate::device::CudaPath::CeOnePass) {
        let name = instance("ce_bwd_recompute", T::DTYPE)?;
        // SAFETY: the arguments match ce_bwd_recompute_*; x and out hold n x V, the
        // targets n, g the first n of its 2n.
        unsafe { launch!(dev, CROSS_ENTROPY, name, row_config(n); &xv, &tv, &gv, &out, &v64) }?;
        return Ok(CudaStorage::wrap_cuda_slice(out, dev));
    }
    let name = instance("ce_bwd", T::DTYPE)?;
    // SAFETY: the arguments match ce_bwd_* in kernels/cross_entropy.cu; x and out hold
    // n x V, the targets n, g and the losses 2n (checked above).
    unsafe { launch!(dev, CROSS_ENTROPY, name, row_config(n); &xv, &tv, &gv, &out, &v64, &n64) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

impl CustomOp3 for RowLossesGrad {
    fn name(&self) -> &'static str {
        "cross-entropy-cuda-grad"
    }
    cpu_fwd_gpu_only!(OP, 3);
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        t: &CudaStorage,
        lt: &Layout,
        g: &CudaStorage,
        lg: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let out = by_dtype!(OP, x.dtype(), grad((x, lx), (t, lt), (g, lg)))?;
        Ok((out, lx.shape().clone()))
    }
}

/// Mean cross-entropy of `logits (N, V)` (f32 or bf16, on the GPU) against `targets
/// (N,)` u32, in f32.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, RowLosses)?
        .mean_all()
}
