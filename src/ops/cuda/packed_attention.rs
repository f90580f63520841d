//! Causal attention on a GPU that reads the packed `qkv (B, T, 3L)` where it lies and
//! writes its output `(B, T, L)` merged: cuBLAS's batched GEMMs, one a product over every
//! sequence's every head, address each head's Q, K and V inside the packed rows (leading
//! dimension 3L), so no head is split or merged by a copy. Those copies (`ucopy`, `copy2d`) were ~10 ms of an H200's GPT-2 124M bf16 step
//! (docs/gpu-runs/2026-11-28-h200/call2-ncu-every-kernel.md). The scores `(B, H, T, T)`
//! are still held, and softmaxed by `cuda::softmax` (with its backward). Two ops, each
//! with its backward beside it, the backward's GEMMs writing into the packed gradient:
//!
//! - `scores = Q K^T` from qkv; backward `dQ = dS K`, `dK = dS^T Q` (the V block 0);
//! - `y = P V` merged, from `(P, qkv)`; backward `dP = dY V^T`, and `dV = P^T dY` (the Q
//!   and K blocks 0).
//!
//! The plan (which product reads and writes where, and its cuBLAS arguments) is
//! `ops::head_gemms`, checked on the CPU; `tests/gpu/kernels.rs` holds the ops to the
//! portable path, forward and backward.

use super::{cpu_fwd_gpu_only, launch, view, HEAD_ADDRESSES};
use crate::device::{cuda_path_on, CudaPath};
use crate::ops::head_gemms::{blas_calls, BlasCall, HeadGemm, Kind, Sizes};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cublas::{result::gemm_strided_batched_ex, sys};
use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{gemm_reduced_precision_bf16, gemm_reduced_precision_f32};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaDevice, CudaStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape};
use candle_core::{Tensor, WithDType};

/// The sizes of a packed `qkv (B, T, 3L)` under `l`, or the error naming what it takes.
fn qkv_sizes(l: &Layout, h: usize, d: usize) -> Result<Sizes> {
    match Sizes::of_qkv(l.dims(), h, d) {
        Some(s) => Ok(s),
        None => candle_core::bail!(
            "attention takes qkv (B, T, 3 x {h} x {d}), got {:?}",
            l.dims()
        ),
    }
}

/// The cuBLAS types of a dtype: data, compute (TF32 or reduced bf16 only where candle's
/// own matmuls use them, so this path rounds as the portable one does).
fn cublas_types(dtype: DType) -> Result<(sys::cudaDataType, sys::cublasComputeType_t)> {
    use sys::cublasComputeType_t::*;
    match dtype {
        DType::F32 if gemm_reduced_precision_f32() => {
            Ok((sys::cudaDataType::CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32))
        }
        DType::F32 => Ok((sys::cudaDataType::CUDA_R_32F, CUBLAS_COMPUTE_32F)),
        DType::BF16 if gemm_reduced_precision_bf16() => {
            Ok((sys::cudaDataType::CUDA_R_16BF, CUBLAS_COMPUTE_32F_FAST_16BF))
        }
        DType::BF16 => Ok((sys::cudaDataType::CUDA_R_16BF, CUBLAS_COMPUTE_32F)),
        d => candle_core::bail!("the packed attention takes f32 or bf16, got {d:?}"),
    }
}

/// Runs `gemms` as [`blas_calls`] lays them out: each product one pointer-array batch over
/// every sequence's every head, its matrices' device addresses (A's, B's, then C's)
/// written by `kernels/head_addresses.cu` on the stream the products run on, and freed
/// behind them; with `TP_CUDA_OFF=batched-heads`, one strided batch a sequence over its
/// heads. `bufs` are the three buffers' device addresses.
///
/// # Safety
/// Every operand's matrices must lie inside its buffer, of `dtype`, and the output's be
/// writable and no input's.
unsafe fn run(
    dev: &CudaDevice,
    dtype: DType,
    s: Sizes,
    gemms: &[HeadGemm],
    bufs: [u64; 3],
) -> Result<()> {
    let size = dtype.size_in_bytes();
    for c in blas_calls(gemms, s) {
        let base = c
            .operands
            .map(|(buf, at, _, _)| bufs[buf] + (at * size) as u64);
        match cuda_path_on(CudaPath::BatchedHeads) {
            true => batched(dev, dtype, &c, base)?,
            false => {
                for seq in 0..c.seqs {
                    let first = seq * c.heads;
                    let at =
                        |w: usize| bufs[c.operands[w].0] + (c.matrix(w, first).1 * size) as u64;
                    strided(dev, dtype, &c, [at(0), at(1), at(2)])?;
                }
            }
        }
    }
    Ok(())
}

/// `c`'s `count()` matrices in one `cublasGemmBatchedEx`, operand `w`'s first at
/// `base[w]`.
///
/// # Safety
/// As [`run`]'s.
unsafe fn batched(dev: &CudaDevice, dtype: DType, c: &BlasCall, base: [u64; 3]) -> Result<()> {
    let (data, compute) = cublas_types(dtype)?;
    let size = dtype.size_in_bytes() as i64;
    let step = |w: usize| (c.operands[w].2 as i64 * size, c.operands[w].3 as i64 * size);
    let [(a_seq, a_head), (b_seq, b_head), (c_seq, c_head)] = [0, 1, 2].map(step);
    let (heads, count) = (c.heads as i64, c.count() as i64);
    // SAFETY: the kernel writes all 3 x count addresses.
    let list = dev.alloc::<u64>(3 * c.count())?;
    let cfg = LaunchConfig {
        grid_dim: ((c.count() as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match head_addresses in kernels/head_addresses.cu; list holds
    // 3 x count addresses.
    launch!(dev, HEAD_ADDRESSES, "head_addresses", cfg;
        &list, &base[0], &base[1], &base[2], &a_seq, &a_head, &b_seq, &b_head, &c_seq,
        &c_head, &heads, &count)?;
    let stream = dev.cuda_stream();
    let (at, held) = list.device_ptr(&stream);
    let of = |w: u64| at + w * count as u64 * 8;
    let (alpha, beta) = (1f32, 0f32);
    sys::cublasGemmBatchedEx(
        *dev.cublas_handle().handle(),
        op(c.trans_a),
        op(c.trans_b),
        c.m as i32,
        c.n as i32,
        c.k as i32,
        &alpha as *const f32 as *const _,
        of(0) as *const *const _,
        data,
        c.lda as i32,
        of(1) as *const *const _,
        data,
        c.ldb as i32,
        &beta as *const f32 as *const _,
        of(2) as *const *mut _,
        data,
        c.ldc as i32,
        count as i32,
        compute,
        sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
    )
    .result()
    .w()?;
    drop(held);
    Ok(())
}

/// One sequence of `c`: its heads in one `cublasGemmStridedBatchedEx`, operand `w`'s first
/// matrix at `at[w]`.
///
/// # Safety
/// As [`run`]'s.
unsafe fn strided(dev: &CudaDevice, dtype: DType, c: &BlasCall, at: [u64; 3]) -> Result<()> {
    let (data, compute) = cublas_types(dtype)?;
    let per_head = |w: usize| c.operands[w].3 as i64;
    let (alpha, beta) = (1f32, 0f32);
    gemm_strided_batched_ex(
        *dev.cublas_handle().handle(),
        op(c.trans_a),
        op(c.trans_b),
        c.m as i32,
        c.n as i32,
        c.k as i32,
        &alpha as *const f32 as *const _,
        at[0] as *const _,
        data,
        c.lda as i32,
        per_head(0),
        at[1] as *const _,
        data,
        c.ldb as i32,
        per_head(1),
        &beta as *const f32 as *const _,
        at[2] as *mut _,
        data,
        c.ldc as i32,
        per_head(2),
        c.heads as i32,
        compute,
        sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
    )
    .w()
}

/// cuBLAS's operation for a transposed operand or not.
fn op(transposed: bool) -> sys::cublasOperation_t {
    match transposed {
        true => sys::cublasOperation_t::CUBLAS_OP_T,
        false => sys::cublasOperation_t::CUBLAS_OP_N,
    }
}

/// The op's output for inputs `ins` (storage and layout each): allocated (zeroed where
/// the plan writes only some of it) and filled by the plan's products.
fn forward<T: WithDType + CudaDType + DeviceRepr + ValidAsZeroBits>(
    kind: Kind,
    s: Sizes,
    ins: &[(&CudaStorage, &Layout)],
) -> Result<(CudaStorage, Shape)> {
    let dev = ins[0].0.device().clone();
    let (gemms, shape, zeroed) = kind.plan(s);
    let mut out = match zeroed {
        true => dev.alloc_zeros::<T>(shape.elem_count())?,
        // SAFETY: the plan's products write every element.
        false => unsafe { dev.alloc::<T>(shape.elem_count())? },
    };
    let views = ins
        .iter()
        .map(|(st, l)| view::<T>(st, l))
        .collect::<Result<Vec<_>>>()?;
    let stream = dev.cuda_stream();
    let held: Vec<_> = views.iter().map(|v| v.device_ptr(&stream)).collect();
    let mut bufs = [0u64; 3];
    for (i, (p, _)) in held.iter().enumerate() {
        bufs[i] = *p;
    }
    let (p, out_guard) = out.device_ptr_mut(&stream);
    bufs[2] = p;
    // SAFETY: the plan's operands lie in buffers of the sizes `Sizes` gives (checked by
    // the callers from qkv's shape and the other inputs' element counts), all of T.
    unsafe { run(&dev, T::DTYPE, s, &gemms, bufs) }?;
    drop((held, out_guard));
    Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
}

/// `forward` at the inputs' dtype.
fn forward_any(
    kind: Kind,
    s: Sizes,
    ins: &[(&CudaStorage, &Layout)],
) -> Result<(CudaStorage, Shape)> {
    match ins[0].0.dtype() {
        DType::F32 => forward::<f32>(kind, s, ins),
        DType::BF16 => forward::<half::bf16>(kind, s, ins),
        d => candle_core::bail!("the packed attention takes f32 or bf16, got {d:?}"),
    }
}

/// Checks that an input other than qkv holds the elements the plan reads.
fn check(l: &Layout, want: usize, what: &str) -> Result<()> {
    if l.shape().elem_count() != want {
        candle_core::bail!(
            "the packed attention's {what} has {} elements, not {want}",
            l.shape().elem_count()
        );
    }
    Ok(())
}

/// `scores = Q K^T (B, H, T, T)` from `qkv`.
struct Scores {
    heads: usize,
    head_dim: usize,
}

impl CustomOp1 for Scores {
    fn name(&self) -> &'static str {
        "packed-attention-scores"
    }

    cpu_fwd_gpu_only!("the packed attention", 1);

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        forward_any(
            Kind::Scores,
            qkv_sizes(l, self.heads, self.head_dim)?,
            &[(s, l)],
        )
    }

    fn bwd(&self, qkv: &Tensor, _: &Tensor, ds: &Tensor) -> Result<Option<Tensor>> {
        let op = Pair {
            kind: Kind::ScoresGrad,
            heads: self.heads,
            head_dim: self.head_dim,
        };
        let ds = ds.contiguous()?.to_dtype(qkv.dtype())?;
        Ok(Some(qkv.apply_op2_no_bwd(&ds, &op)?))
    }
}

/// The two-input products: `y = P V`, and the backward's.
struct Pair {
    kind: Kind,
    heads: usize,
    head_dim: usize,
}

impl CustomOp2 for Pair {
    fn name(&self) -> &'static str {
        "packed-attention"
    }

    cpu_fwd_gpu_only!("the packed attention", 2);

    fn cuda_fwd(
        &self,
        a: &CudaStorage,
        la: &Layout,
        b: &CudaStorage,
        lb: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (h, d) = (self.heads, self.head_dim);
        // qkv is the first input of ScoresGrad, the second of Values and ValuesGradP; the
        // other input's size follows from it. ValuesGradV has P and dY: sizes from both.
        let s = match self.kind {
            Kind::ScoresGrad => qkv_sizes(la, h, d)?,
            Kind::Values | Kind::ValuesGradP => qkv_sizes(lb, h, d)?,
            Kind::ValuesGradV => match (la.dims(), lb.dims()) {
                (&[b, hh, t, t2], &[b2, t3, l]) if hh == h && t == t2 && b == b2 && t == t3 && l == h * d => {
                    Sizes { b, t, h, d }
                }
                (p, dy) => candle_core::bail!("the packed attention's dV takes P (B, H, T, T) and dY (B, T, L), got {p:?} and {dy:?}"),
            },
            Kind::Scores => candle_core::bail!("scores are a one-input op"),
        };
        let scores = s.b * s.h * s.t * s.t;
        let merged = s.b * s.t * s.l();
        match self.kind {
            Kind::ScoresGrad => check(lb, scores, "dS")?,
            Kind::Values => check(la, scores, "P")?,
            Kind::ValuesGradP => check(la, merged, "dY")?,
            _ => {}
        }
        forward_any(self.kind, s, &[(a, la), (b, lb)])
    }

    fn bwd(
        &self,
        p: &Tensor,
        qkv: &Tensor,
        _: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        if self.kind != Kind::Values {
            candle_core::bail!("the packed attention's backward ops have no backward");
        }
        let (heads, head_dim) = (self.heads, self.head_dim);
        let dy = dy.contiguous()?.to_dtype(qkv.dtype())?;
        let dp = dy.apply_op2_no_bwd(
            qkv,
            &Pair {
                kind: Kind::ValuesGradP,
                heads,
                head_dim,
            },
        )?;
        let dqkv = p.apply_op2_no_bwd(
            &dy,
            &Pair {
                kind: Kind::ValuesGradV,
                heads,
                head_dim,
            },
        )?;
        Ok((Some(dp), Some(dqkv)))
    }
}

/// The scores `Q K^T (B, H, T, T)` of a packed `qkv (B, T, 3L)` (unscaled: the softmax
/// scales them), read where they lie.
pub fn scores(qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    qkv.contiguous()?.apply_op1(Scores { heads, head_dim })
}

/// `P V (B, T, L)`, merged, from probabilities `p (B, H, T, T)` and the packed `qkv`'s V.
pub fn weighted_values(p: &Tensor, qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    let op = Pair {
        kind: Kind::Values,
        heads,
        head_dim,
    };
    p.contiguous()?.apply_op2(&qkv.contiguous()?, op)
}
