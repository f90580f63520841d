//! Model shape and options, and the named presets.

use crate::blocks::BlockConfig;
use crate::ops::{Activation, NormKind};
use anyhow::{bail, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub vocab_size: usize,
    pub block_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    pub bias: bool,
    pub norm: NormKind,
    pub activation: Activation,
    pub norm_eps: f64,
    pub dropout: f64,
}

/// A named model size. `vocab_size` is `None` where the dataset decides it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    pub block_size: usize,
    pub bias: bool,
    pub norm: NormKind,
    pub activation: Activation,
    pub vocab_size: Option<usize>,
    /// The pattern used when none is given.
    pub pattern: &'static str,
    pub dataset: &'static str,
}

pub const PRESETS: [Preset; 4] = [
    // The seed experiment: tiny Shakespeare, char level.
    Preset {
        name: "mini",
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        block_size: 64,
        bias: false,
        norm: NormKind::Layernorm,
        activation: Activation::Gelu,
        vocab_size: None,
        pattern: "sppp",
        dataset: "shakespeare_char",
    },
    Preset {
        name: "baby",
        n_layer: 6,
        n_head: 6,
        n_embd: 384,
        block_size: 256,
        bias: false,
        norm: NormKind::Layernorm,
        activation: Activation::Gelu,
        vocab_size: None,
        pattern: "6xt",
        dataset: "shakespeare_char",
    },
    // GPT-2 124M.
    Preset {
        name: "gpt2",
        n_layer: 12,
        n_head: 12,
        n_embd: 768,
        block_size: 1024,
        bias: true,
        norm: NormKind::Layernorm,
        activation: Activation::GeluTanh,
        vocab_size: Some(50304),
        pattern: "12xt",
        dataset: "shakespeare_char",
    },
    // microgpt's names model: RMSNorm, ReLU, no biases, a few thousand parameters.
    Preset {
        name: "micro",
        n_layer: 1,
        n_head: 4,
        n_embd: 16,
        block_size: 16,
        bias: false,
        norm: NormKind::Rmsnorm,
        activation: Activation::Relu,
        vocab_size: None,
        pattern: "t",
        dataset: "names",
    },
];

pub fn preset(name: &str) -> Result<Preset> {
    match PRESETS.iter().find(|p| p.name == name) {
        Some(p) => Ok(*p),
        None => {
            let names: Vec<_> = PRESETS.iter().map(|p| p.name).collect();
            bail!(
                "unknown preset `{name}`: choose one of {}",
                names.join(", ")
            )
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
        if !(0.0..1.0).contains(&self.dropout) {
            bail!("dropout {} must be in [0, 1)", self.dropout);
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
            dropout: self.dropout,
        }
    }
}
