//! Model shape and options.

use crate::blocks::BlockConfig;
use crate::device::{ComputeDtype, Kernels};
use crate::ops::{Activation, NormKind};
use anyhow::{bail, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The model's shape and options. It is also the model part of a run's config (its keys
/// are config keys), so the keys that fix a model are exactly these fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    /// `null` in a config: the dataset's vocabulary size (0 here until resolved).
    #[serde(serialize_with = "vocab_to_yaml", deserialize_with = "vocab_from_yaml")]
    pub vocab_size: usize,
    pub block_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    pub bias: bool,
    pub norm: NormKind,
    pub activation: Activation,
    pub norm_eps: f64,
    /// Which implementation of the ops runs (`fused` CPU kernels or `portable` candle
    /// ops); the same function either way, so a checkpoint does not depend on it.
    #[serde(skip)]
    pub kernels: Kernels,
    /// Precision of the passes (weights stay f32): like `kernels`, a choice of how the
    /// same function is computed, not part of the model.
    #[serde(skip)]
    pub dtype: ComputeDtype,
    /// Whether the tied embedding/head is split by vocabulary over the TP group: like
    /// `kernels`, a choice of how the same function is computed (checkpoints stay logical).
    #[serde(skip)]
    pub vocab_parallel: bool,
}

fn vocab_to_yaml<S: Serializer>(v: &usize, s: S) -> std::result::Result<S::Ok, S::Error> {
    if *v == 0 {
        s.serialize_none()
    } else {
        s.serialize_some(v)
    }
}

fn vocab_from_yaml<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    Ok(Option::<usize>::deserialize(d)?.unwrap_or(0))
}

/// GPT-2's conventions, for the fields a source does not give (a Hugging Face config's
/// norms and activation; a stored config lacking a newer key). The presets, where runs
/// take their models from, are `config::presets`.
impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            vocab_size: 0,
            block_size: 1024,
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
            bias: true,
            norm: NormKind::Layernorm,
            activation: Activation::GeluTanh,
            norm_eps: 1e-5,
            kernels: Kernels::Fused,
            dtype: ComputeDtype::F32,
            vocab_parallel: false,
        }
    }
}

impl ModelConfig {
    /// Sizes must divide over the tensor-parallel group; each failure names the fix.
    pub fn check(&self, tp: usize) -> Result<()> {
        if self.n_head == 0 || self.n_embd == 0 || self.n_layer == 0 || self.block_size == 0 {
            bail!("n_head, n_embd, n_layer and block_size must all be at least 1");
        }
        if !self.n_head.is_multiple_of(tp) {
            bail!(
                "n_head {} is not divisible by tp {tp}: each rank needs whole heads; choose tp dividing {} or change n_head",
                self.n_head,
                self.n_head
            );
        }
        if !(4 * self.n_embd).is_multiple_of(tp) {
            bail!(
                "4*n_embd = {} is not divisible by tp {tp}: choose tp dividing {} or change n_embd",
                4 * self.n_embd,
                4 * self.n_embd
            );
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            bail!(
                "n_embd {} is not divisible by n_head {}: choose n_embd as a multiple of n_head",
                self.n_embd,
                self.n_head
            );
        }
        if self.vocab_size == 0 {
            bail!("vocab_size is not resolved: give the dataset's vocabulary size");
        }
        if self.vocab_parallel {
            crate::tp::VocabShard::new(self.vocab_size, tp - 1, tp)?;
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            bail!("norm_eps {} must be a positive number", self.norm_eps);
        }
        Ok(())
    }

    pub fn block_config(&self) -> BlockConfig {
        BlockConfig {
            n_embd: self.n_embd,
            n_head: self.n_head,
            n_layer: self.n_layer,
            bias: self.bias,
            norm: self.norm,
            activation: self.activation,
            norm_eps: self.norm_eps,
            kernels: self.kernels,
            dtype: self.dtype.dtype(),
        }
    }
}
