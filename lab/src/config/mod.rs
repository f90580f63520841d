//! The run configuration: nanoGPT's flat key names plus `pattern`, `tp`, `dp`, read and
//! written flat (serde `flatten`) but held as parts with one job each: what model on what
//! data, the optimiser and its batch, parallelism, evaluation, checkpoints.
//!
//! Resolution (preset < `--config` file < flags < `--set`) is in [`overrides`]; every
//! value is checked in [`validate`] before anything is allocated.

pub mod defaults;
pub mod key_flags;
pub mod overrides;
pub mod presets;
pub mod run_config;
pub mod validate;
pub mod variant;

pub use key_flags::take_key_flags;
pub use overrides::{
    parse_assignment, read_config_file, resolve, resolve_resume, Origin, Override,
};
pub use presets::{preset, Preset, Recipe, PRESETS};
pub use run_config::{
    CheckpointConfig, EvalConfig, FinalEval, ModelPart, OptimConfig, ParallelConfig, RunConfig,
};
pub use variant::Variant;
