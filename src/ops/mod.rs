//! Element-wise and normalisation ops, all differentiable through candle's autograd.
//!
//! Every block and the model call these and nothing else for linears, norms, activations,
//! attention and the loss. Each takes the [`Kernels`] to run: `Portable` is made of
//! candle's differentiable ops (any device; the `*_composed` functions), `Fused` the CPU
//! kernels with hand-written backward in [`fused`], each tested against the portable one.
//! On a GPU (CUDA build) `Fused` runs this crate's CUDA kernels where there is one
//! (attention's softmax or whole attention, LayerNorm, GELU, the loss, the embedding's
//! backward; `ops::cuda*`) and the portable path elsewhere. candle-nn's fast `layer_norm` / `softmax_last_dim` / `rms_norm`
//! have no backward (candle #2977, #3011): do not use them for training.

pub mod adamw;
pub mod copy;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod hand_backward;
pub mod head_gemms;
pub mod profile;

pub use crate::device::Kernels;
use candle_core::{DType, Result, Tensor, D};
use cpu::fused;

/// Whether `x` runs the fused CPU kernels under `k`.
fn fused_for(k: Kernels, x: &Tensor) -> bool {
    x.device().is_cpu() && k.for_tensor(x) == Kernels::Fused
}

/// `w` in the dtype of the activation it meets: weights are f32 masters, cast (with a
/// gradient that flows back to them in f32) where a bf16 pass uses them.
fn as_dtype_of(w: &Tensor, x: &Tensor) -> Result<Tensor> {
    if w.dtype() == x.dtype() {
        Ok(w.clone())
    } else {
        w.to_dtype(x.dtype())
    }
}
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    Layernorm,
    Rmsnorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// Exact erf form (PyTorch's default, which nanoGPT uses).
    Gelu,
    /// GPT-2's tanh approximation.
    GeluTanh,
    Relu,
}

/// `(x - mean) / sqrt(var + eps) * w + b` over the last dimension.
pub fn layer_norm(
    k: Kernels,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() && k.for_tensor(x) == Kernels::Fused && w.dtype() == DType::F32 {
        // Normalised (and the bias added) in f32 inside the kernel, returned in x's dtype.
        return cuda::layer_norm::layer_norm(x, w, b, eps);
    }
    if x.dtype() != w.dtype() {
        // Low-precision activations are normalised in the weights' f32.
        return layer_norm(k, &x.to_dtype(w.dtype())?, w, b, eps)?.to_dtype(x.dtype());
    }
    if !fused_for(k, x) {
        return layer_norm_composed(x, w, b, eps);
    }
    let y = fused::layer_norm(x, w, eps)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// LayerNorm composed of candle's differentiable ops: the reference for the fused kernel.
pub fn layer_norm_composed(x: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let y = xc.broadcast_div(&(var + eps)?.sqrt()?)?.broadcast_mul(w)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// `x / sqrt(mean(x^2) + eps) * w` over the last dimension.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    if x.dtype() != w.dtype() {
        return rms_norm(&x.to_dtype(w.dtype())?, w, eps)?.to_dtype(x.dtype());
    }
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + eps)?.sqrt()?)?.broadcast_mul(w)
}

/// A normalisation layer on given tensors (weight, optional bias).
#[derive(Debug, Clone)]
pub struct Norm {
    pub kind: NormKind,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub eps: f64,
    pub kernels: Kernels,
}

impl Norm {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.kind {
            NormKind::Layernorm => {
                layer_norm(self.kernels, x, &self.weight, self.bias.as_ref(), self.eps)
            }
            NormKind::Rmsnorm => rms_norm(x, &self.weight, self.eps),
        }
    }
}

pub fn activation(k: Kernels, x: &Tensor, act: Activation) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() && k.for_tensor(x) == Kernels::Fused && act != Activation::Relu {
        return cuda::gelu::gelu(x, act == Activation::GeluTanh);
    }
    if !fused_for(k, x) {
        return activation_composed(x, act);
    }
    match act {
        Activation::Gelu => fused::gelu(x, false),
        Activation::GeluTanh => fused::gelu(x, true),
        Activation::Relu => x.relu(),
    }
}

/// candle's own GELU ops: the reference for the fused kernel.
pub fn activation_composed(x: &Tensor, act: Activation) -> Result<Tensor> {
    match act {
        Activation::Gelu => x.gelu_erf(),
        Activation::GeluTanh => x.gelu(),
        Activation::Relu => x.relu(),
    }
}

/// Softmax over the last dimension. The max is detached: it only shifts the exponent
/// for range, and its exact gradient is zero.
pub fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// `x (.., in) @ w (in, out) + b` (`w` may be a transposed view).
pub fn linear(k: Kernels, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(b) = b.filter(|_| x.device().is_cuda() && k.for_tensor(x) == Kernels::Fused) {
        // cuBLAS's matmul, then the bias by this crate's kernel (`bias_add`).
        return bias_add(k, &linear_composed(x, w, None)?, b);
    }
    if !fused_for(k, x) {
        return linear_composed(x, w, b);
    }
    fused::linear(x, w, b)
}

/// `act(x @ w + b)`: a column-parallel linear and its activation (the MLP's first half).
/// On a GPU with fused kernels and a GELU, the bias and the activation in one kernel each
/// way after cuBLAS's matmul (`cuda::bias_gelu`, the same bits as adding then
/// activating); elsewhere exactly [`linear`] then [`activation`].
pub fn linear_activation(
    k: Kernels,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    act: Activation,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(b) = b.filter(|b| {
        x.device().is_cuda()
            && k.for_tensor(x) == Kernels::Fused
            && b.dtype() == DType::F32
            && act != Activation::Relu
            && crate::device::cuda_path_on(crate::device::CudaPath::BiasGelu)
    }) {
        let u = linear_composed(x, w, None)?;
        return cuda::bias_gelu::bias_gelu(&u, b, act == Activation::GeluTanh);
    }
    activation(k, &linear(k, x, w, b)?, act)
}

/// `x (.., in) @ w^T + b` for a weight stored `(out, in)` (the tied head's `wte`): its
/// gradient comes back `(out, in)` with no transpose in the graph.
pub fn linear_t(k: Kernels, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    if !fused_for(k, x) {
        return linear_composed(x, &w.t()?, b);
    }
    fused::linear_t(x, w, b)
}

/// `x (.., C) + b (C,)`: on a GPU with fused kernels, one kernel each way with the f32
/// bias added in f32 (`cuda::bias`); else candle's broadcast add of the bias in x's dtype.
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
pub fn bias_add(k: Kernels, x: &Tensor, b: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() && k.for_tensor(x) == Kernels::Fused && b.dtype() == DType::F32 {
        return cuda::bias::bias_add(x, b);
    }
    x.broadcast_add(&as_dtype_of(b, x)?)
}

/// candle's matmul and broadcast add: the reference for the fused linear.
pub fn linear_composed(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let (n_in, n_out) = w.dims2()?;
    let w = &as_dtype_of(w, x)?;
    let b = b.map(|b| as_dtype_of(b, x)).transpose()?;
    let b = b.as_ref();
    let mut shape = x.dims().to_vec();
    *shape.last_mut().expect("rank >= 1") = n_out;
    let y = x.reshape(((), n_in))?.matmul(w)?;
    let y = match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    y.reshape(shape)
}

/// Causal self-attention of a packed `qkv (B, T, 3 * heads * head_dim)` (Q, K, V blocks,
/// heads contiguous within each) -> `(B, T, heads * head_dim)`.
pub fn causal_attention(k: Kernels, qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if qkv.device().is_cuda() && k.for_tensor(qkv) == Kernels::Fused {
        // Scores that fit: cuBLAS's tensor-core matmuls around one softmax kernel each
        // way. On an H200 (2026-11-29) GPT-2's bf16 step took 39.7 ms so and 75.9 ms with
        // the flash kernel below taking its attention: that kernel is for what does not
        // fit (bf16, head size 64), then the scalar kernel that never holds the scores.
        let (b, t, _) = qkv.dims3()?;
        if b * heads * t * t <= cuda::softmax::MAX_SCORES {
            return causal_attention_materialised(qkv, heads, head_dim);
        }
        if cuda::flash_attention::fits(qkv, heads, head_dim) {
            return cuda::flash_attention::causal_attention(qkv, heads);
        }
        if head_dim <= cuda::ATTENTION_MAX_HEAD_DIM {
            return cuda::causal_attention(qkv, heads, head_dim);
        }
    }
    if !fused_for(k, qkv) {
        return causal_attention_composed(qkv, heads, head_dim);
    }
    fused::causal_attention(qkv, heads, head_dim)
}

/// Attention from candle's ops (head split, matmuls, masked softmax, merge): the
/// reference for the fused kernel.
pub fn causal_attention_composed(qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    let [q, k, v] = split_heads(qkv, heads, head_dim)?;
    let att = (q.matmul(&k.t()?)? * (1.0 / (head_dim as f64).sqrt()))?;
    merge_heads(&causal_softmax_composed(&att)?.matmul(&v)?)
}

/// Attention on a GPU with the `(B, heads, T, T)` scores held: cuBLAS's matmuls reading
/// Q, K and V inside the packed qkv and writing the heads merged (no split or merge
/// copies), around the fused causal softmax.
#[cfg(feature = "cuda")]
fn causal_attention_materialised(qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    let scale = 1.0 / (head_dim as f64).sqrt();
    if !crate::device::cuda_path_on(crate::device::CudaPath::PackedAttention) {
        // What it replaced: the heads split and merged by copies.
        let [q, k, v] = split_heads(qkv, heads, head_dim)?;
        let p = cuda::softmax::causal_softmax(&q.matmul(&k.t()?)?, scale)?;
        return merge_heads(&p.matmul(&v)?);
    }
    let scores = cuda::packed_attention::scores(qkv, heads, head_dim)?;
    let p = cuda::softmax::causal_softmax(&scores, scale)?;
    cuda::packed_attention::weighted_values(&p, qkv, heads, head_dim)
}

/// Q, K and V of a packed `qkv (B, T, 3 * heads * head_dim)`, each `(B, heads, T,
/// head_dim)` and contiguous: the head split of every composed attention path.
pub fn split_heads(qkv: &Tensor, heads: usize, head_dim: usize) -> Result<[Tensor; 3]> {
    let (b, t, _) = qkv.dims3()?;
    let l = heads * head_dim;
    let part = |i: usize| -> Result<Tensor> {
        qkv.narrow(2, i * l, l)?
            .reshape((b, t, heads, head_dim))?
            .transpose(1, 2)?
            .contiguous()
    };
    Ok([part(0)?, part(1)?, part(2)?])
}

/// Heads `(B, heads, T, head_dim)` merged back to `(B, T, heads * head_dim)`.
pub fn merge_heads(y: &Tensor) -> Result<Tensor> {
    let (b, heads, t, head_dim) = y.dims4()?;
    y.transpose(1, 2)?.reshape((b, t, heads * head_dim))
}

/// Causal softmax of attention scores `(.., T, T)`: position i attends to j <= i.
pub fn causal_softmax(k: Kernels, scores: &Tensor) -> Result<Tensor> {
    if !fused_for(k, scores) {
        return causal_softmax_composed(scores);
    }
    fused::causal_softmax(scores)
}

/// Causal softmax from a mask and candle's ops: the reference for the fused kernel.
pub fn causal_softmax_composed(scores: &Tensor) -> Result<Tensor> {
    if scores.dtype() != DType::F32 {
        // Exponentials and their sums in f32, as for the loss.
        return causal_softmax_composed(&scores.to_dtype(DType::F32)?)?.to_dtype(scores.dtype());
    }
    let t = scores.dim(D::Minus1)?;
    let mask: Vec<u8> = (0..t * t).map(|i| u8::from(i % t > i / t)).collect();
    let mask = Tensor::from_vec(mask, (t, t), scores.device())?.broadcast_as(scores.shape())?;
    let neg_inf = Tensor::new(f32::NEG_INFINITY, scores.device())?.broadcast_as(scores.shape())?;
    softmax_last_dim(&mask.where_cond(&neg_inf, scores)?)
}

/// Rows `ids (N,)` (u32) of `table (V, C)`: the token embedding's lookup.
pub fn embedding(k: Kernels, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if table.device().is_cuda() && k.for_tensor(table) == Kernels::Fused {
        // candle's backward (index_add) walks all ids in one thread a column.
        return cuda::embedding::embedding(table, ids);
    }
    let _ = k;
    table.index_select(ids, 0)
}

/// Mean cross-entropy of `logits (N, V)` against `targets (N,)` (u32).
pub fn cross_entropy(k: Kernels, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if logits.device().is_cuda() && k.for_tensor(logits) == Kernels::Fused {
        // bf16 logits read as they are (the kernel's arithmetic is f32): no f32 copy.
        return cuda::cross_entropy::cross_entropy(logits, targets);
    }
    if logits.dtype() != DType::F32 {
        return cross_entropy(k, &logits.to_dtype(DType::F32)?, targets);
    }
    if !fused_for(k, logits) {
        return cross_entropy_composed(logits, targets);
    }
    fused::cross_entropy(logits, targets)
}

/// Cross-entropy from candle's ops: the reference for the fused kernel.
pub fn cross_entropy_composed(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let max = logits.max_keepdim(D::Minus1)?.detach();
    let shifted = logits.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let logp = shifted.broadcast_sub(&lse)?;
    let picked = logp.gather(&targets.unsqueeze(1)?, 1)?;
    picked.mean_all()?.neg()
}

/// `(N, 1)`: the maximum of each row of `x (N, V)`, without gradient (a softmax shift).
pub fn row_max(k: Kernels, x: &Tensor) -> Result<Tensor> {
    let x = x.detach().to_dtype(DType::F32)?;
    if !fused_for(k, &x) {
        return x.max_keepdim(D::Minus1);
    }
    fused::row_max(&x)
}

/// The local statistics of a cross-entropy whose logits are split by columns over ranks
/// (the vocabulary-parallel loss): for `x (N, V_r)` and `shift (N, 1)` (the rows' maxima
/// over every rank; no gradient), `(N, 2)` holding each row's sum of `exp(x - shift)` and
/// its target's `x - shift` where `target[i]` (a column of `x`) is given, else 0.
pub fn shard_softmax_stats(
    k: Kernels,
    x: &Tensor,
    shift: &Tensor,
    target: &[Option<u32>],
) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let shift = shift.detach();
    if fused_for(k, &x) {
        return fused::shard_softmax_stats(&x, &shift, target.to_vec());
    }
    let n = target.len();
    let columns: Vec<u32> = target.iter().map(|t| t.unwrap_or(0)).collect();
    let owned: Vec<f32> = target
        .iter()
        .map(|t| f32::from(u8::from(t.is_some())))
        .collect();
    let columns = Tensor::from_vec(columns, (n, 1), x.device())?;
    let owned = Tensor::from_vec(owned, (n, 1), x.device())?;
    let shifted = x.broadcast_sub(&shift)?;
    let sum_exp = shifted.exp()?.sum_keepdim(1)?;
    let picked = shifted.gather(&columns, 1)?.broadcast_mul(&owned)?;
    Tensor::cat(&[&sum_exp, &picked], 1)
}

/// Inverted dropout with a mask drawn from `key`: every rank that passes the same key
/// drops the same elements, which keeps replicated activations identical across a TP
/// group.
pub fn dropout(x: &Tensor, p: f64, key: u64) -> Result<Tensor> {
    dropout_part(x, p, key, 1, 0, 1)
}

/// Dropout of a rank's part of a larger logical activation: the mask is drawn for the
/// logical tensor (dimension `dim` of size `parts * x.dim(dim)`) and part `part` is kept,
/// so a sharded activation is dropped exactly as the unsharded model would drop it.
pub fn dropout_part(
    x: &Tensor,
    p: f64,
    key: u64,
    dim: usize,
    part: usize,
    parts: usize,
) -> Result<Tensor> {
    if p <= 0.0 {
        return Ok(x.clone());
    }
    let mut full_shape = x.dims().to_vec();
    let local = full_shape[dim];
    full_shape[dim] = local * parts;
    let n: usize = full_shape.iter().product();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(key);
    let scale = 1.0 / (1.0 - p) as f32;
    let mask: Vec<f32> = (0..n)
        .map(|_| if rng.random::<f64>() < p { 0.0 } else { scale })
        .collect();
    let mask = Tensor::from_vec(mask, full_shape, x.device())?
        .to_dtype(x.dtype())?
        .narrow(dim, part * local, local)?;
    x.mul(&mask)
}
