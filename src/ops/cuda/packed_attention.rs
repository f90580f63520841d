//! Causal attention on a GPU that reads the packed `qkv (B, T, 3L)` where it lies and
//! writes its output `(B, T, L)` merged: cuBLAS's strided-batched GEMMs over the heads of
//! each sequence address every head's Q, K and V inside the packed rows (leading
//! dimension 3L, the next head `head_dim` further on), so no head is split or merged by a
//! copy. Those copies (`ucopy`, `copy2d`) were ~10 ms of an H200's GPT-2 124M bf16 step
//! (docs/gpu-runs/2026-11-28-h200/call2-ncu-every-kernel.md). The scores `(B, H, T, T)`
//! are still held, and softmaxed by `cuda::softmax` (with its backward). Two ops, each
//! with its backward beside it, the backward's GEMMs writing into the packed gradient:
//!
//! - `scores = Q K^T` from qkv; backward `dQ = dS K`, `dK = dS^T Q` (the V block 0);
//! - `y = P V` merged, from `(P, qkv)`; backward `dP = dY V^T`, and `dV = P^T dY` (the Q
//!   and K blocks 0).
//!
//! `tests/gpu/kernels.rs` holds them to the portable path, forward and backward.

use super::{cpu_fwd_gpu_only, view};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cublas::{result::gemm_strided_batched_ex, sys};
use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{gemm_reduced_precision_bf16, gemm_reduced_precision_f32};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaDevice, CudaStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape};
use candle_core::{Tensor, WithDType};

/// The sizes of one attention: batch, sequence, heads, head size.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    b: usize,
    t: usize,
    h: usize,
    d: usize,
}

impl Sizes {
    /// `L = heads * head_dim`.
    fn l(&self) -> usize {
        self.h * self.d
    }

    /// From a packed `qkv (B, T, 3L)`.
    fn of_qkv(l: &Layout, h: usize, d: usize) -> Result<Self> {
        match l.dims() {
            &[b, t, w] if w == 3 * h * d && d > 0 => Ok(Self { b, t, h, d }),
            dims => candle_core::bail!("attention takes qkv (B, T, 3 x {h} x {d}), got {dims:?}"),
        }
    }
}

/// Where a GEMM operand's matrices lie: which buffer (`0` and `1` the op's inputs, `2`
/// its output), the element offset of sequence 0's head 0, the offset from one sequence
/// to the next and from one head to the next, the row-major leading dimension, and
/// whether the operand enters transposed.
#[derive(Debug, Clone, Copy)]
struct Operand {
    buf: usize,
    at: usize,
    per_seq: usize,
    per_head: usize,
    ld: usize,
    trans: bool,
}

/// One row-major product a head, `C (M x N) = op(A) op(B)` with `K` the inner size, for
/// every head of every sequence.
#[derive(Debug, Clone, Copy)]
struct HeadGemm {
    mnk: (usize, usize, usize),
    a: Operand,
    b: Operand,
    c: Operand,
}

/// The operands in the op's buffers, by the layout each holds.
fn qkv_block(s: Sizes, block: usize, trans: bool) -> Operand {
    let w = 3 * s.l();
    Operand {
        buf: 0,
        at: block * s.l(),
        per_seq: s.t * w,
        per_head: s.d,
        ld: w,
        trans,
    }
}
fn scores_in(s: Sizes, buf: usize, trans: bool) -> Operand {
    Operand {
        buf,
        at: 0,
        per_seq: s.h * s.t * s.t,
        per_head: s.t * s.t,
        ld: s.t,
        trans,
    }
}
fn merged_in(s: Sizes, buf: usize, trans: bool) -> Operand {
    Operand {
        buf,
        at: 0,
        per_seq: s.t * s.l(),
        per_head: s.d,
        ld: s.l(),
        trans,
    }
}

/// The kinds of product, each an op of candle's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `(qkv) -> scores`: `S = Q K^T`.
    Scores,
    /// `(qkv, dS) -> dqkv`: `dQ = dS K`, `dK = dS^T Q`, dV 0.
    ScoresGrad,
    /// `(P, qkv) -> y`: `Y = P V`, merged.
    Values,
    /// `(dY, qkv) -> dP`: `dP = dY V^T`.
    ValuesGradP,
    /// `(P, dY) -> dqkv`: `dV = P^T dY`, dQ and dK 0.
    ValuesGradV,
}

impl Kind {
    /// The products, their output's shape, and whether it starts zeroed (a packed
    /// gradient of which the products write only some blocks).
    fn plan(self, s: Sizes) -> (Vec<HeadGemm>, Shape, bool) {
        let (t, d) = (s.t, s.d);
        let qkv_out = |block| Operand {
            buf: 2,
            ..qkv_block(s, block, false)
        };
        let packed = Shape::from((s.b, t, 3 * s.l()));
        let scores = Shape::from((s.b, s.h, t, t));
        match self {
            Kind::Scores => {
                let (a, b) = (qkv_block(s, 0, false), qkv_block(s, 1, true));
                let c = scores_in(s, 2, false);
                (
                    vec![HeadGemm {
                        mnk: (t, t, d),
                        a,
                        b,
                        c,
                    }],
                    scores,
                    false,
                )
            }
            Kind::ScoresGrad => {
                let ds = scores_in(s, 1, false);
                let dq = HeadGemm {
                    mnk: (t, d, t),
                    a: ds,
                    b: qkv_block(s, 1, false),
                    c: qkv_out(0),
                };
                let dst = scores_in(s, 1, true);
                let dk = HeadGemm {
                    mnk: (t, d, t),
                    a: dst,
                    b: qkv_block(s, 0, false),
                    c: qkv_out(1),
                };
                (vec![dq, dk], packed, true)
            }
            Kind::Values => {
                let p = scores_in(s, 0, false);
                let v = Operand {
                    buf: 1,
                    ..qkv_block(s, 2, false)
                };
                let y = merged_in(s, 2, false);
                (
                    vec![HeadGemm {
                        mnk: (t, d, t),
                        a: p,
                        b: v,
                        c: y,
                    }],
                    Shape::from((s.b, t, s.l())),
                    false,
                )
            }
            Kind::ValuesGradP => {
                let dy = merged_in(s, 0, false);
                let vt = Operand {
                    buf: 1,
                    ..qkv_block(s, 2, true)
                };
                let dp = scores_in(s, 2, false);
                (
                    vec![HeadGemm {
                        mnk: (t, t, d),
                        a: dy,
                        b: vt,
                        c: dp,
                    }],
                    scores,
                    false,
                )
            }
            Kind::ValuesGradV => {
                let pt = scores_in(s, 0, true);
                let dy = merged_in(s, 1, false);
                (
                    vec![HeadGemm {
                        mnk: (t, d, t),
                        a: pt,
                        b: dy,
                        c: qkv_out(2),
                    }],
                    packed,
                    true,
                )
            }
        }
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

/// Runs `gemms` for every sequence over its heads: row-major `C = op(A) op(B)` is
/// column-major `C^T = op(B)^T op(A)^T`, so cuBLAS gets B first. `bufs` are the three
/// buffers' device addresses.
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
    use sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
    let (data, compute) = cublas_types(dtype)?;
    let size = dtype.size_in_bytes() as u64;
    let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
    let (alpha, beta) = (1f32, 0f32);
    let blas = dev.cublas_handle();
    for g in gemms {
        let (m, n, k) = g.mnk;
        for seq in 0..s.b {
            let at = |o: &Operand| bufs[o.buf] + ((o.at + seq * o.per_seq) as u64) * size;
            gemm_strided_batched_ex(
                *blas.handle(),
                op(g.b.trans),
                op(g.a.trans),
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const _,
                at(&g.b) as *const _,
                data,
                g.b.ld as i32,
                g.b.per_head as i64,
                at(&g.a) as *const _,
                data,
                g.a.ld as i32,
                g.a.per_head as i64,
                &beta as *const f32 as *const _,
                at(&g.c) as *mut _,
                data,
                g.c.ld as i32,
                g.c.per_head as i64,
                s.h as i32,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
            )
            .w()?;
        }
    }
    Ok(())
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
            Sizes::of_qkv(l, self.heads, self.head_dim)?,
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
            Kind::ScoresGrad => Sizes::of_qkv(la, h, d)?,
            Kind::Values | Kind::ValuesGradP => Sizes::of_qkv(lb, h, d)?,
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
