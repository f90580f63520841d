//! The whole default config of a preset (its model and recipe from `presets`, and the
//! defaults of every other key), and `Default` for the config's parts: the `mini`
//! preset's.

use super::presets::{preset, Recipe};
use super::run_config::{
    CheckpointConfig, EvalConfig, FinalEval, ModelPart, OptimConfig, ParallelConfig, RunConfig,
};
use anyhow::Result;
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::CommDtype;
use tp_harness::device::{ComputeDtype, DeviceKind, Kernels};
use tp_harness::ops::cpu::gemm::route::Matmul;
use tp_harness::train::bucket_cap::BucketCap;

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
        let p = preset(name)?;
        let r = p.recipe;
        Ok(Self {
            model: ModelPart {
                preset: p.name.into(),
                pattern: BlockLayout::parse(p.pattern).expect("a preset's pattern parses"),
                dataset: p.dataset.into(),
                text_path: None,
                text_tokenizer: None,
                arch: p.model(),
            },
            optim: r.optim(),
            parallel: ParallelConfig {
                tp: 2,
                dp: 1,
                link_gbps: 0.0,
                link_latency_us: 0.0,
                kernels: Kernels::Fused,
                matmul: Matmul::Gemm,
                device: DeviceKind::Cpu,
                dtype: ComputeDtype::F32,
                tf32: false,
                vocab_parallel: false,
                comm_dtype: CommDtype::F32,
                overlap_grad_reduce: true,
                ddp_bucket_mb: BucketCap::Auto,
            },
            eval: EvalConfig {
                eval_interval: 250,
                eval_iters: 20,
                log_interval: 10,
                sample_tokens: 300,
                sample_temperature: 0.8,
                sample_top_k: 200,
                final_eval: FinalEval::Full,
                tensorboard: false,
                tensorboard_dir: None,
                // After the first steps' warm-up (allocation, caches), a few steps.
                trace: false,
                trace_start: 10,
                trace_steps: 3,
            },
            checkpoints: CheckpointConfig {
                checkpoint_interval: 500,
                keep_checkpoints: 3,
            },
        })
    }
}
