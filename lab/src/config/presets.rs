//! The presets: each one value — a model, the pattern and data it runs with when none are
//! given, and the training recipe (optimiser, schedule, batch) its reference experiment
//! used. `--preset NAME` (or `preset: NAME`) starts a config from one; every key can be
//! overridden after it.

use anyhow::Result;
use tp_harness::error::user;
use tp_harness::model::ModelConfig;
use tp_harness::ops::{Activation, NormKind};

/// A preset's optimiser, schedule and batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recipe {
    pub batch_size: usize,
    pub max_iters: usize,
    pub learning_rate: f64,
    pub min_lr: f64,
    pub warmup_iters: usize,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
}

/// A named starting point for a run.
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
    /// `None` where the dataset decides the vocabulary.
    pub vocab_size: Option<usize>,
    /// The pattern used when none is given.
    pub pattern: &'static str,
    pub dataset: &'static str,
    pub recipe: Recipe,
}

/// nanoGPT's shakespeare_char recipe (lr 1e-3 -> 1e-4, beta2 0.99), the default
/// experiment's.
const NANOGPT_SHAKESPEARE: Recipe = Recipe {
    batch_size: 12,
    max_iters: 2000,
    learning_rate: 1e-3,
    min_lr: 1e-4,
    warmup_iters: 100,
    weight_decay: 0.1,
    beta1: 0.9,
    beta2: 0.99,
};

pub const PRESETS: [Preset; 4] = [
    // The default experiment: tiny Shakespeare, char level.
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
        recipe: NANOGPT_SHAKESPEARE,
    },
    // nanoGPT's shakespeare_char "baby GPT", with its batch.
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
        recipe: Recipe {
            batch_size: 64,
            ..NANOGPT_SHAKESPEARE
        },
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
        recipe: NANOGPT_SHAKESPEARE,
    },
    // microgpt's names model (RMSNorm, ReLU, no biases, a few thousand parameters) and
    // its optimiser: a higher rate for a tiny model.
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
        recipe: Recipe {
            batch_size: 32,
            max_iters: 1000,
            learning_rate: 1e-2,
            min_lr: 1e-3,
            warmup_iters: 20,
            weight_decay: 0.0,
            beta1: 0.85,
            beta2: 0.99,
        },
    },
];

/// The preset called `name`, or a user error listing them.
pub fn preset(name: &str) -> Result<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<_> = PRESETS.iter().map(|p| p.name).collect();
        user(format!(
            "unknown preset `{name}`: choose one of {}",
            names.join(", ")
        ))
    })
}

impl Preset {
    /// The preset's model (vocabulary still the dataset's where it has none of its own).
    pub fn model(&self) -> ModelConfig {
        ModelConfig {
            vocab_size: self.vocab_size.unwrap_or(0),
            block_size: self.block_size,
            n_layer: self.n_layer,
            n_head: self.n_head,
            n_embd: self.n_embd,
            bias: self.bias,
            norm: self.norm,
            activation: self.activation,
            norm_eps: 1e-5,
            ..ModelConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_found_by_name_and_an_unknown_one_lists_them() {
        assert_eq!(preset("micro").unwrap().recipe.learning_rate, 1e-2);
        assert_eq!(preset("gpt2").unwrap().model().vocab_size, 50304);
        let e = preset("huge").unwrap_err().to_string();
        assert!(e.contains("mini, baby, gpt2, micro"), "{e}");
    }
}
