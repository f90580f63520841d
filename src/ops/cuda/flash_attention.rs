//! Causal attention on the tensor cores without the `(B, H, T, T)` scores
//! (`kernels/flash_attention.cu`, FlashAttention-2's tiling): bf16 qkv packed `(B, T, 3L)`
//! read in place, `y (B, T, L)` written merged, head size 64 and T a multiple of 64, for
//! sequences whose scores do not fit (`ops::causal_attention`: where they fit, cuBLAS and
//! the softmax kernel in `packed_attention` made a GPT-2 step on an H200 1.9x as fast,
//! 39.7 ms against 75.9 on 2026-11-29; these tiles need tuning before they win). The
//! forward keeps each row's log-sum-exp for the backward inside the op (an op is made per
//! call, so its state is that call's); the backward is three kernels (`D = rowsum(dy y)`,
//! then dK and dV a key tile, dQ a query tile), each gradient with one writer.
//! `tests/gpu/kernels.rs` holds it to the portable path; `TP_CUDA_OFF=flash-attention`
//! turns it back to the scalar kernel (`ops::cuda::causal_attention`).

use super::{cpu_fwd_gpu_only, launch, view, warp_rows, FLASH_ATTENTION};
use crate::device::{cuda_path_on, CudaPath};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig};
use candle_core::{CudaStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Tensor};
use std::sync::Mutex;

/// The head size and tile the kernels are written for (`FA_D`, `FA_TILE`).
const HEAD_DIM: usize = 64;
const TILE: usize = 64;

/// Whether this path takes `qkv (B, T, 3 heads head_dim)`: bf16 on a GPU, head size 64,
/// T a multiple of 64, and not turned off.
pub fn fits(qkv: &Tensor, heads: usize, head_dim: usize) -> bool {
    let Ok((_, t, w)) = qkv.dims3() else {
        return false;
    };
    qkv.device().is_cuda()
        && qkv.dtype() == DType::BF16
        && head_dim == HEAD_DIM
        && w == 3 * heads * head_dim
        && t > 0
        && t % TILE == 0
        // WMMA loads from 32-byte-aligned rows: an allocation's start, or 16 bf16 on.
        && qkv.layout().start_offset().is_multiple_of(16)
        && cuda_path_on(CudaPath::FlashAttention)
}

/// Grid (T / 64, B * H), 4 warps a block.
fn tiles(b: usize, t: usize, h: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((t / TILE) as u32, (b * h) as u32, 1),
        block_dim: (32, 4, 1),
        shared_mem_bytes: 0,
    }
}

/// `(B, T, H)` of a packed qkv, checked against what the kernels take.
fn sizes(l: &Layout, heads: usize) -> Result<(usize, usize, usize)> {
    match l.dims() {
        &[b, t, w] if w == 3 * heads * HEAD_DIM && t % TILE == 0 && b * heads <= 65_535 => {
            Ok((b, t, heads))
        }
        d => candle_core::bail!(
            "the flash attention takes qkv (B, T, 3 x {heads} x 64) with T a multiple of 64, got {d:?}"
        ),
    }
}

struct FlashAttention {
    heads: usize,
    /// Each row's log-sum-exp `(B, H, T)`, from the forward to its backward.
    lse: Mutex<Option<CudaSlice<f32>>>,
}

impl CustomOp1 for FlashAttention {
    fn name(&self) -> &'static str {
        "flash-attention-cuda"
    }

    cpu_fwd_gpu_only!("the flash attention", 1);

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let (b, t, h) = sizes(l, self.heads)?;
        let dev = s.device().clone();
        let qkv = view::<half::bf16>(s, l)?;
        // SAFETY: the kernel writes every element of y and lse (a lane a half row of
        // every row of every head).
        let y = unsafe { dev.alloc::<half::bf16>(b * t * h * HEAD_DIM)? };
        let lse = unsafe { dev.alloc::<f32>(b * h * t)? };
        let (t64, h64, scale) = (t as i64, h as i64, 1.0 / (HEAD_DIM as f32).sqrt());
        // SAFETY: the arguments match flash_fwd in kernels/flash_attention.cu; qkv holds B x
        // T x 3 x H x 64 (checked by `sizes`), y B x T x H x 64, lse B x H x T.
        unsafe {
            launch!(dev, FLASH_ATTENTION, "flash_fwd", tiles(b, t, h); &qkv, &y, &lse, &t64, &h64, &scale)
        }?;
        *self
            .lse
            .lock()
            .map_err(|_| candle_core::Error::Msg("flash attention: a poisoned lock".into()))? =
            Some(lse);
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev),
            Shape::from((b, t, h * HEAD_DIM)),
        ))
    }

    fn bwd(&self, qkv: &Tensor, y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let lse = self
            .lse
            .lock()
            .map_err(|_| candle_core::Error::Msg("flash attention: a poisoned lock".into()))?
            .take();
        let Some(lse) = lse else {
            candle_core::bail!("the flash attention's backward ran twice, or before its forward");
        };
        let op = FlashAttentionBackward {
            heads: self.heads,
            lse,
        };
        let dy = dy.contiguous()?.to_dtype(DType::BF16)?;
        Ok(Some(qkv.apply_op3_no_bwd(y, &dy, &op)?))
    }
}

/// `dqkv` from `(qkv, y, dy)` and the forward's log-sum-exps.
struct FlashAttentionBackward {
    heads: usize,
    lse: CudaSlice<f32>,
}

impl CustomOp3 for FlashAttentionBackward {
    fn name(&self) -> &'static str {
        "flash-attention-cuda-backward"
    }

    cpu_fwd_gpu_only!("the flash attention", 3);

    fn cuda_fwd(
        &self,
        qkv: &CudaStorage,
        lq: &Layout,
        y: &CudaStorage,
        ly: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (b, t, h) = sizes(lq, self.heads)?;
        let merged = b * t * h * HEAD_DIM;
        if ly.shape().elem_count() != merged || ldy.shape().elem_count() != merged {
            candle_core::bail!("the flash attention's backward: y and dy must be (B, T, L)");
        }
        let dev = qkv.device().clone();
        let (q, yv, g) = (
            view::<half::bf16>(qkv, lq)?,
            view::<half::bf16>(y, ly)?,
            view::<half::bf16>(dy, ldy)?,
        );
        let rows = b * t * h;
        // SAFETY: flash_delta writes every row's D; flash_dkdv the K and V blocks of dqkv
        // and flash_dq its Q block: every element.
        let delta = unsafe { dev.alloc::<f32>(rows)? };
        let dqkv = unsafe { dev.alloc::<half::bf16>(3 * merged)? };
        let (t64, h64, r64) = (t as i64, h as i64, rows as i64);
        let scale = 1.0 / (HEAD_DIM as f32).sqrt();
        // SAFETY: the arguments match flash_delta; y and dy hold B x T x L, delta the rows.
        unsafe {
            launch!(dev, FLASH_ATTENTION, "flash_delta", warp_rows(rows); &yv, &g, &delta, &t64, &h64, &r64)
        }?;
        let cfg = tiles(b, t, h);
        // SAFETY: the arguments match flash_dkdv and flash_dq (the sizes as above; lse the
        // forward's B x H x T). On one stream, they run after flash_delta.
        unsafe {
            launch!(dev, FLASH_ATTENTION, "flash_dkdv", cfg;
                &q, &g, &self.lse, &delta, &dqkv, &t64, &h64, &scale)
        }?;
        unsafe {
            launch!(dev, FLASH_ATTENTION, "flash_dq", cfg;
                &q, &g, &self.lse, &delta, &dqkv, &t64, &h64, &scale)
        }?;
        Ok((CudaStorage::wrap_cuda_slice(dqkv, dev), lq.shape().clone()))
    }
}

/// Causal self-attention of a packed bf16 `qkv (B, T, 3L)` on the GPU -> `(B, T, L)`,
/// where [`fits`] says so.
pub fn causal_attention(qkv: &Tensor, heads: usize) -> Result<Tensor> {
    qkv.contiguous()?.apply_op1(FlashAttention {
        heads,
        lse: Mutex::new(None),
    })
}
