//! The causal softmax of attention scores on a GPU (`kernels/causal_softmax.cu`): `(..,
//! T, T)` scores in f32 or bf16, scaled, masked and normalised in one kernel (f32
//! arithmetic), and its backward in one more. `ops::causal_attention` puts it between
//! cuBLAS's batched matmuls where the scores fit [`MAX_SCORES`]; the attention kernel of
//! `ops::cuda`, which never holds them, takes longer sequences. `tests/gpu.rs` holds both
//! to the portable path.

use super::{by_dtype, cpu_fwd_gpu_only, instance, launch, view, warp_rows, Arg, CAUSAL_SOFTMAX};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::DeviceRepr;
use candle_core::cuda_backend::CudaDType;
use candle_core::{CudaStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor, WithDType};

/// The op, as errors name it.
const OP: &str = "the CUDA causal softmax";

/// The most score elements (B x heads x T x T, each layer) that attention holds: 2^28,
/// 512 MiB of bf16 scores and as much of probabilities a layer (GPT-2 at batch 8 x 1024:
/// 2^26.6). Beyond it the attention kernel that never holds them runs instead.
pub const MAX_SCORES: usize = 1 << 28;

/// Rows and T of scores `(.., T, T)`.
fn rows_of(l: &Layout) -> Result<(usize, usize)> {
    match l.dims() {
        [.., a, b] if a == b && *a > 0 => Ok((l.shape().elem_count() / b, *b)),
        d => candle_core::bail!("causal softmax takes scores (.., T, T), got {d:?}"),
    }
}

struct CausalSoftmax {
    scale: f32,
}

fn forward<T: CudaDType + DeviceRepr + WithDType>(
    scale: f32,
    s: &CudaStorage,
    ls: &Layout,
) -> Result<CudaStorage> {
    let (rows, t) = rows_of(ls)?;
    let dev = s.device().clone();
    let sv = view::<T>(s, ls)?;
    // SAFETY: the kernel writes every element of p (masked ones as 0).
    let p = unsafe { dev.alloc::<T>(rows * t)? };
    let (r64, ti) = (rows as i64, t as i32);
    let name = instance("csm_fwd", T::DTYPE)?;
    // SAFETY: the arguments match csm_fwd_* in kernels/causal_softmax.cu; s and p hold
    // rows x T each.
    unsafe { launch!(dev, CAUSAL_SOFTMAX, name, warp_rows(rows); &sv, &p, &r64, &ti, &scale) }?;
    Ok(CudaStorage::wrap_cuda_slice(p, dev))
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax-cuda"
    }
    cpu_fwd_gpu_only!(OP, 1);
    fn cuda_fwd(&self, s: &CudaStorage, ls: &Layout) -> Result<(CudaStorage, Shape)> {
        let p = by_dtype!(OP, s.dtype(), forward(self.scale, s, ls))?;
        Ok((p, ls.shape().clone()))
    }
    fn bwd(&self, _s: &Tensor, p: &Tensor, dp: &Tensor) -> Result<Option<Tensor>> {
        let dp = dp.contiguous()?.to_dtype(p.dtype())?;
        let op = CausalSoftmaxGrad { scale: self.scale };
        Ok(Some(p.apply_op2_no_bwd(&dp, &op)?))
    }
}

/// `ds` from `(p, dp)`.
struct CausalSoftmaxGrad {
    scale: f32,
}

fn backward<T: CudaDType + DeviceRepr + WithDType>(
    scale: f32,
    (p, lp): Arg,
    (dp, ldp): Arg,
) -> Result<CudaStorage> {
    let (rows, t) = rows_of(lp)?;
    let dev = p.device().clone();
    let (pv, gv) = (view::<T>(p, lp)?, view::<T>(dp, ldp)?);
    // SAFETY: the kernel writes every element of ds (masked ones as 0).
    let ds = unsafe { dev.alloc::<T>(rows * t)? };
    let (r64, ti) = (rows as i64, t as i32);
    let name = instance("csm_bwd", T::DTYPE)?;
    // SAFETY: the arguments match csm_bwd_* in kernels/causal_softmax.cu; p, dp (same
    // shape, checked by the caller) and ds hold rows x T each.
    unsafe {
        launch!(dev, CAUSAL_SOFTMAX, name, warp_rows(rows); &pv, &gv, &ds, &r64, &ti, &scale)
    }?;
    Ok(CudaStorage::wrap_cuda_slice(ds, dev))
}

impl CustomOp2 for CausalSoftmaxGrad {
    fn name(&self) -> &'static str {
        "causal-softmax-cuda-grad"
    }
    cpu_fwd_gpu_only!(OP, 2);
    fn cuda_fwd(
        &self,
        p: &CudaStorage,
        lp: &Layout,
        dp: &CudaStorage,
        ldp: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if lp.shape() != ldp.shape() {
            candle_core::bail!(
                "causal softmax backward: p {:?} and dp {:?} differ",
                lp.dims(),
                ldp.dims()
            );
        }
        let ds = by_dtype!(OP, p.dtype(), backward(self.scale, (p, lp), (dp, ldp)))?;
        Ok((ds, lp.shape().clone()))
    }
}

/// `softmax(scale * scores)` over keys `j <= i` for query `i`, 0 beyond, for scores `(..,
/// T, T)` (f32 or bf16, on the GPU), in their dtype.
pub fn causal_softmax(scores: &Tensor, scale: f64) -> Result<Tensor> {
    scores.contiguous()?.apply_op1(CausalSoftmax {
        scale: scale as f32,
    })
}
