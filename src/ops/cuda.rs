//! This crate's GPU kernels (CUDA build): `kernels/*.cu`, compiled to PTX by `build.rs`
//! and loaded into candle's device on first use, wrapped as candle ops with their backward
//! next to them. Each is checked against the portable path by `tests/gpu.rs`.
//!
//! Causal attention: forward and backward never hold the `(B, H, T, T)` probabilities
//! (online softmax forward; the backward recomputes them from Q, K and one log-sum-exp per
//! row). f32 and bf16 (computed in f32).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{
    CudaDevice, CudaStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType,
};

pub(super) mod ptx {
    include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
}

/// Head sizes the attention kernel takes (a warp holds one row, four values a lane).
pub const ATTENTION_MAX_HEAD_DIM: usize = 128;
/// Rows (warps) per thread block of every one-warp-a-row kernel.
const WARPS: u32 = 4;

/// A storage and its layout, as a kernel wrapper takes each input.
pub(super) type Arg<'a> = (&'a CudaStorage, &'a Layout);

/// The name suffix of a kernel's instance for `dtype` (every kernel of this crate has an
/// f32 and a bf16 one).
pub(super) fn suffix(dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::BF16 => Ok("bf16"),
        d => candle_core::bail!("this crate's CUDA kernels take f32 or bf16, got {d:?}"),
    }
}

/// `$f::<T>(args)` with `T` the element type of `$dtype`: every kernel of this crate has an
/// f32 and a bf16 instance; `$op` names the op in the error for any other dtype.
macro_rules! by_dtype {
    ($op:expr, $dtype:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            candle_core::DType::F32 => $f::<f32>($($arg),*),
            candle_core::DType::BF16 => $f::<half::bf16>($($arg),*),
            d => candle_core::bail!("{} takes f32 or bf16, got {d:?}", $op),
        }
    };
}
pub(super) use by_dtype;

/// The `cpu_fwd` of an op that exists on GPUs only.
pub(super) fn gpu_only(op: &str) -> Result<(candle_core::CpuStorage, Shape)> {
    candle_core::bail!("{op} runs on GPUs only")
}

/// A contiguous view of `s` under `l`.
pub(super) fn view<'a, T: CudaDType>(s: &'a CudaStorage, l: &Layout) -> Result<CudaView<'a, T>> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(s.as_cuda_slice::<T>()?.slice(a..b)),
        None => candle_core::bail!("this crate's CUDA kernels need contiguous inputs"),
    }
}

/// The launch of a kernel that gives each of `rows` rows one warp ([`WARPS`] a block);
/// warps past the last row return at once.
pub(super) fn warp_rows(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((rows as u32).div_ceil(WARPS), 1, 1),
        block_dim: (32, WARPS, 1),
        shared_mem_bytes: 0,
    }
}

/// `(B, T, 3L)` as `(b, t, l)` with `L = heads * head_dim`.
fn dims(l: &Layout, heads: usize, head_dim: usize) -> Result<(usize, usize)> {
    let &[b, t, w] = l.dims() else {
        candle_core::bail!("attention takes qkv (B, T, 3L), got {:?}", l.dims());
    };
    if w != 3 * heads * head_dim {
        candle_core::bail!("qkv width {w} is not 3 x {heads} heads x {head_dim}");
    }
    Ok((b, t))
}

struct CausalAttention {
    heads: usize,
    head_dim: usize,
}

impl CausalAttention {
    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    fn forward<T: CudaDType + DeviceRepr + WithDType>(
        &self,
        dev: &CudaDevice,
        qkv: &CudaView<'_, T>,
        b: usize,
        t: usize,
    ) -> Result<CudaSlice<T>> {
        let (h, d) = (self.heads, self.head_dim);
        let name = format!("attn_fwd_{}", suffix(T::DTYPE)?);
        let func = dev.get_or_load_custom_func(&name, "tp_attention", ptx::ATTENTION)?;
        // SAFETY: the kernel writes every element of y.
        let y = unsafe { dev.alloc::<T>(b * t * h * d)? };
        let (bi, ti, hi, di, scale) = (b as i32, t as i32, h as i32, d as i32, self.scale());
        let mut args = func.builder();
        args.arg(qkv)
            .arg(&y)
            .arg(&bi)
            .arg(&ti)
            .arg(&hi)
            .arg(&di)
            .arg(&scale);
        // SAFETY: argument types and order match attn_fwd_* in kernels/attention.cu.
        unsafe { args.launch(warp_rows(b * h * t)) }.w()?;
        Ok(y)
    }
}

impl CustomOp1 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention-cuda"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("the CUDA attention op runs on GPUs only")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let (b, t) = dims(l, self.heads, self.head_dim)?;
        let dev = s.device().clone();
        let out = match s.dtype() {
            DType::F32 => {
                let y = self.forward::<f32>(&dev, &view(s, l)?, b, t)?;
                CudaStorage::wrap_cuda_slice(y, dev)
            }
            DType::BF16 => {
                let y = self.forward::<half::bf16>(&dev, &view(s, l)?, b, t)?;
                CudaStorage::wrap_cuda_slice(y, dev)
            }
            d => candle_core::bail!("the CUDA attention kernel takes f32 or bf16, got {d:?}"),
        };
        Ok((out, Shape::from((b, t, self.heads * self.head_dim))))
    }

    fn bwd(&self, qkv: &Tensor, y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let op = CausalAttentionBackward {
            heads: self.heads,
            head_dim: self.head_dim,
        };
        let dy = dy.contiguous()?.to_dtype(qkv.dtype())?;
        Ok(Some(qkv.apply_op3_no_bwd(y, &dy, &op)?))
    }
}

/// `dqkv` from `(qkv, y, dy)`: two kernels, one over query rows (dq, and each row's
/// log-sum-exp and `dy . y`), one over key rows (dk, dv), no atomics.
struct CausalAttentionBackward {
    heads: usize,
    head_dim: usize,
}

impl CausalAttentionBackward {
    #[allow(clippy::too_many_arguments)]
    fn backward<T: CudaDType + DeviceRepr + WithDType>(
        &self,
        dev: &CudaDevice,
        qkv: &CudaView<'_, T>,
        y: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        b: usize,
        t: usize,
    ) -> Result<CudaSlice<T>> {
        let (h, d) = (self.heads, self.head_dim);
        let sfx = suffix(T::DTYPE)?;
        let rows = b * h * t;
        // SAFETY: the two kernels together write every element of dqkv, lse and delta
        // (the first the Q block and the statistics, the second the K and V blocks).
        let dqkv = unsafe { dev.alloc::<T>(b * t * 3 * h * d)? };
        let lse = unsafe { dev.alloc::<f32>(rows)? };
        let delta = unsafe { dev.alloc::<f32>(rows)? };
        let (bi, ti, hi, di) = (b as i32, t as i32, h as i32, d as i32);
        let scale = 1.0 / (d as f32).sqrt();

        let f = dev.get_or_load_custom_func(
            &format!("attn_bwd_q_{sfx}"),
            "tp_attention",
            ptx::ATTENTION,
        )?;
        let mut args = f.builder();
        args.arg(qkv)
            .arg(y)
            .arg(dy)
            .arg(&dqkv)
            .arg(&lse)
            .arg(&delta);
        args.arg(&bi).arg(&ti).arg(&hi).arg(&di).arg(&scale);
        // SAFETY: argument types and order match attn_bwd_q_* in kernels/attention.cu.
        unsafe { args.launch(warp_rows(rows)) }.w()?;

        let f = dev.get_or_load_custom_func(
            &format!("attn_bwd_kv_{sfx}"),
            "tp_attention",
            ptx::ATTENTION,
        )?;
        let mut args = f.builder();
        args.arg(qkv).arg(dy).arg(&dqkv).arg(&lse).arg(&delta);
        args.arg(&bi).arg(&ti).arg(&hi).arg(&di).arg(&scale);
        // SAFETY: argument types and order match attn_bwd_kv_* (same stream: after dq).
        unsafe { args.launch(warp_rows(rows)) }.w()?;
        Ok(dqkv)
    }
}

impl CustomOp3 for CausalAttentionBackward {
    fn name(&self) -> &'static str {
        "causal-attention-cuda-backward"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("the CUDA attention op runs on GPUs only")
    }

    fn cuda_fwd(
        &self,
        qkv: &CudaStorage,
        lq: &Layout,
        y: &CudaStorage,
        ly: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (b, t) = dims(lq, self.heads, self.head_dim)?;
        let dev = qkv.device().clone();
        let out = match qkv.dtype() {
            DType::F32 => {
                let (q, y, g) = (view::<f32>(qkv, lq)?, view(y, ly)?, view(dy, ldy)?);
                CudaStorage::wrap_cuda_slice(self.backward(&dev, &q, &y, &g, b, t)?, dev)
            }
            DType::BF16 => {
                let (q, y, g) = (view::<half::bf16>(qkv, lq)?, view(y, ly)?, view(dy, ldy)?);
                CudaStorage::wrap_cuda_slice(self.backward(&dev, &q, &y, &g, b, t)?, dev)
            }
            d => candle_core::bail!("the CUDA attention kernel takes f32 or bf16, got {d:?}"),
        };
        Ok((out, lq.shape().clone()))
    }
}

/// Causal self-attention of a packed `qkv (B, T, 3L)` on the GPU -> `(B, T, L)`.
pub fn causal_attention(qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    if head_dim > ATTENTION_MAX_HEAD_DIM {
        candle_core::bail!(
            "the CUDA attention kernel takes head_dim <= {ATTENTION_MAX_HEAD_DIM}, got {head_dim}"
        );
    }
    qkv.contiguous()?
        .apply_op1(CausalAttention { heads, head_dim })
}
