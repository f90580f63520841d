//! This crate's GPU kernels (CUDA build): `kernels/*.cu`, compiled to PTX by `build.rs`
//! and loaded into candle's device on first use, wrapped as candle ops with their backward
//! next to them (`ops::cuda::*`, one file a kernel file). Each is checked against the
//! portable path by `tests/gpu.rs`. Here: what every wrapper shares (the PTX modules,
//! `launch!`, the dtype dispatch, contiguous views, the one-warp-a-row launch), and the
//! attention kernel for sequences whose scores are too large to hold.
//!
//! Causal attention: forward and backward never hold the `(B, H, T, T)` probabilities
//! (online softmax forward; the backward recomputes them from Q, K and one log-sum-exp per
//! row). f32 and bf16 (computed in f32).

pub mod adamw;
pub mod bias;
pub mod bias_gelu;
pub mod cross_entropy;
pub mod embedding;
pub mod flash_attention;
pub mod gelu;
pub mod layer_norm;
pub mod packed_attention;
pub mod softmax;
pub mod sumsq;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::CudaDType;
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

/// The name suffix of a kernel's instance for `dtype` (every kernel of this crate that
/// reads tensors has an f32 and a bf16 one).
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

/// The `cpu_fwd` of a custom op of 1, 2 or 3 inputs that exists on GPUs only, `$op`
/// naming it in the error.
macro_rules! cpu_fwd_gpu_only {
    ($op:expr, 1) => {
        fn cpu_fwd(
            &self,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            $crate::ops::cuda::gpu_only($op)
        }
    };
    ($op:expr, 2) => {
        fn cpu_fwd(
            &self,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            $crate::ops::cuda::gpu_only($op)
        }
    };
    ($op:expr, 3) => {
        fn cpu_fwd(
            &self,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            $crate::ops::cuda::gpu_only($op)
        }
    };
}
pub(super) use cpu_fwd_gpu_only;

/// One of this crate's PTX modules (`kernels/<name>.cu`): the name candle's device keeps
/// it under once loaded, and its text.
#[derive(Debug, Clone, Copy)]
pub(super) struct Module {
    pub name: &'static str,
    pub ptx: &'static str,
}

impl Module {
    const fn new(name: &'static str, ptx: &'static str) -> Self {
        Self { name, ptx }
    }
}

pub(super) const ATTENTION: Module = Module::new("tp_attention", ptx::ATTENTION);
pub(super) const CAUSAL_SOFTMAX: Module = Module::new("tp_causal_softmax", ptx::CAUSAL_SOFTMAX);
pub(super) const CROSS_ENTROPY: Module = Module::new("tp_cross_entropy", ptx::CROSS_ENTROPY);
pub(super) const EMBEDDING: Module = Module::new("tp_embedding", ptx::EMBEDDING);
pub(super) const GELU: Module = Module::new("tp_gelu", ptx::GELU);
pub(super) const LAYER_NORM: Module = Module::new("tp_layer_norm", ptx::LAYER_NORM);
pub(super) const ADAMW: Module = Module::new("tp_adamw", ptx::ADAMW);
pub(super) const BIAS: Module = Module::new("tp_bias", ptx::BIAS);
pub(super) const SUMSQ: Module = Module::new("tp_sumsq", ptx::SUMSQ);
pub(super) const FLASH_ATTENTION: Module = Module::new("tp_flash_attention", ptx::FLASH_ATTENTION);
pub(super) const HEAD_ADDRESSES: Module = Module::new("tp_head_addresses", ptx::HEAD_ADDRESSES);

/// The name of kernel `base`'s instance for `dtype` (`ln_fwd` -> `ln_fwd_bf16`).
pub(super) fn instance(base: &str, dtype: DType) -> Result<String> {
    Ok(format!("{base}_{}", suffix(dtype)?))
}

/// Loads kernel `$name` of `$module` into `$dev` (once a device) and launches it over
/// `$cfg` with the arguments in order: what every wrapper would otherwise spell out as
/// load, builder, arguments and launch. Evaluates to the launch's candle `Result`; a
/// kernel that does not load returns its error through `?` inside. Unsafe, as the launch is: the caller wraps it in `unsafe` and says in
/// its `SAFETY:` line that the arguments match the kernel's parameters in type and order
/// and that every buffer holds what the kernel reads and writes.
macro_rules! launch {
    ($dev:expr, $module:expr, $name:expr, $cfg:expr; $($arg:expr),+ $(,)?) => {{
        let module: $crate::ops::cuda::Module = $module;
        let func = $dev.get_or_load_custom_func(&$name, module.name, module.ptx)?;
        let cfg: candle_core::cuda_backend::cudarc::driver::LaunchConfig = $cfg;
        let mut args = func.builder();
        $(candle_core::cuda_backend::cudarc::driver::PushKernelArg::arg(&mut args, $arg);)+
        candle_core::cuda_backend::WrapErr::w(args.launch(cfg))
    }};
}
pub(super) use launch;

/// Rows and row length of `x (.., C)` under `l`; `op` names the op in the error an empty
/// last dimension gives.
pub(super) fn rows_of(l: &Layout, op: &str) -> Result<(usize, usize)> {
    let c = l.dims().last().copied().unwrap_or(1);
    if c == 0 {
        candle_core::bail!("{op} over an empty last dimension");
    }
    Ok((l.shape().elem_count() / c, c))
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
        // SAFETY: the kernel writes every element of y.
        let y = unsafe { dev.alloc::<T>(b * t * h * d)? };
        let (bi, ti, hi, di, scale) = (b as i32, t as i32, h as i32, d as i32, self.scale());
        let name = instance("attn_fwd", T::DTYPE)?;
        // SAFETY: the arguments match attn_fwd_* in kernels/attention.cu; qkv holds
        // B x T x 3HD (checked by `dims`), y B x T x HD.
        unsafe {
            launch!(dev, ATTENTION, name, warp_rows(b * h * t); qkv, &y, &bi, &ti, &hi, &di, &scale)
        }?;
        Ok(y)
    }
}

impl CustomOp1 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention-cuda"
    }

    cpu_fwd_gpu_only!("the CUDA attention op", 1);

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
        let rows = b * h * t;
        // SAFETY: the two kernels together write every element of dqkv, lse and delta
        // (the first the Q block and the statistics, the second the K and V blocks).
        let dqkv = unsafe { dev.alloc::<T>(b * t * 3 * h * d)? };
        let lse = unsafe { dev.alloc::<f32>(rows)? };
        let delta = unsafe { dev.alloc::<f32>(rows)? };
        let (bi, ti, hi, di) = (b as i32, t as i32, h as i32, d as i32);
        let scale = 1.0 / (d as f32).sqrt();

        let (cfg, name) = (warp_rows(rows), instance("attn_bwd_q", T::DTYPE)?);
        // SAFETY: the arguments match attn_bwd_q_* in kernels/attention.cu; qkv and dqkv
        // hold B x T x 3HD, y and dy B x T x HD (the forward's), lse and delta one a row.
        unsafe {
            launch!(dev, ATTENTION, name, cfg;
                qkv, y, dy, &dqkv, &lse, &delta, &bi, &ti, &hi, &di, &scale)
        }?;
        let name = instance("attn_bwd_kv", T::DTYPE)?;
        // SAFETY: the arguments match attn_bwd_kv_* (the sizes as above). On the same
        // stream, it runs after dq's kernel, which wrote lse and delta.
        unsafe {
            launch!(dev, ATTENTION, name, cfg;
                qkv, dy, &dqkv, &lse, &delta, &bi, &ti, &hi, &di, &scale)
        }?;
        Ok(dqkv)
    }
}

impl CustomOp3 for CausalAttentionBackward {
    fn name(&self) -> &'static str {
        "causal-attention-cuda-backward"
    }

    cpu_fwd_gpu_only!("the CUDA attention op", 3);

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
