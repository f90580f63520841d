//! Defaults: each preset's training recipe (the optimiser, schedule and batch its seed
//! experiment used; one row per preset), and the whole default config of a preset.

use super::run_config::{
    CheckpointConfig, EvalConfig, FinalEval, ModelPart, OptimConfig, ParallelConfig, RunConfig,
};
use crate::device::{ComputeDtype, DeviceKind, Kernels};
use crate::error::user;
use crate::model::preset;
use anyhow::Result;

/// A preset's optimiser settings.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub preset: &'static str,
    pub batch_size: usize,
    pub max_iters: usize,
    pub learning_rate: f64,
    pub min_lr: f64,
    pub warmup_iters: usize,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
}

/// The seed experiment's recipe (nanoGPT's shakespeare_char, lr 1e-3 -> 1e-4).
const SEED: Recipe = Recipe {
    preset: "mini",
    batch_size: 12,
    max_iters: 2000,
    learning_rate: 1e-3,
    min_lr: 1e-4,
    warmup_iters: 100,
    weight_decay: 0.1,
    beta1: 0.9,
    beta2: 0.99,
};

pub const RECIPES: [Recipe; 4] = [
    SEED,
    // nanoGPT's shakespeare_char "baby GPT" batch.
    Recipe {
        preset: "baby",
        batch_size: 64,
        ..SEED
    },
    Recipe {
        preset: "gpt2",
        ..SEED
    },
    // microgpt's optimiser: a higher rate for a tiny model.
    Recipe {
        preset: "micro",
        batch_size: 32,
        max_iters: 1000,
        learning_rate: 1e-2,
        min_lr: 1e-3,
        warmup_iters: 20,
        weight_decay: 0.0,
        beta1: 0.85,
        beta2: 0.99,
    },
];

/// The recipe of `preset` (the seed's for a preset without a row of its own).
pub fn recipe(preset: &str) -> Recipe {
    RECIPES
        .iter()
        .copied()
        .find(|r| r.preset == preset)
        .unwrap_or(SEED)
}

impl Recipe {
    pub fn optim(&self) -> OptimConfig {
        OptimConfig {
            batch_size: self.batch_size,
            gradient_accumulation_steps: 1,
            max_iters: self.max_iters,
            learning_rate: self.learning_rate,
            min_lr: self.min_lr,
            warmup_iters: self.warmup_iters,
            lr_decay_iters: None,
            decay_lr: true,
            weight_decay: self.weight_decay,
            beta1: self.beta1,
            beta2: self.beta2,
            adam_eps: 1e-8,
            grad_clip: 1.0,
            dropout: 0.0,
            seed: 1337,
            init_from: None,
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        Self::for_preset("mini").expect("the mini preset exists")
    }
}

macro_rules! default_from_run_config {
    ($($part:ident: $ty:ty),*) => {$(
        impl Default for $ty {
            fn default() -> Self {
                RunConfig::default().$part
            }
        }
    )*};
}
default_from_run_config!(
    optim: OptimConfig,
    parallel: ParallelConfig,
    eval: EvalConfig,
    checkpoints: CheckpointConfig
);

impl Default for ModelPart {
    fn default() -> Self {
        RunConfig::default().model
    }
}

impl RunConfig {
    /// Defaults of a preset: its model, and its training recipe.
    pub fn for_preset(name: &str) -> Result<Self> {
        let p = preset(name).map_err(user)?;
        let r = recipe(p.name);
        Ok(Self {
            model: ModelPart {
                preset: p.name.into(),
                pattern: p.pattern.into(),
                dataset: p.dataset.into(),
                text_path: None,
                arch: p.model(),
            },
            optim: r.optim(),
            parallel: ParallelConfig {
                tp: 2,
                dp: 1,
                link_gbps: 0.0,
                link_latency_us: 0.0,
                kernels: Kernels::Fused,
                device: DeviceKind::Cpu,
                dtype: ComputeDtype::F32,
                tf32: false,
                vocab_parallel: false,
            },
            eval: EvalConfig {
                eval_interval: 250,
                eval_iters: 20,
                log_interval: 10,
                sample_tokens: 300,
                sample_temperature: 0.8,
                sample_top_k: 200,
                final_eval: FinalEval::Full,
            },
            checkpoints: CheckpointConfig {
                checkpoint_interval: 500,
                keep_checkpoints: 3,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_model_preset_has_its_own_recipe() {
        for p in crate::model::PRESETS {
            assert!(
                super::RECIPES.iter().any(|r| r.preset == p.name),
                "preset {} has no recipe",
                p.name
            );
        }
    }
}
