//! tp-harness: communication-efficient tensor parallelism of GPT-2 on candle.
//!
//! From the bottom up (no file imports a file that imports it back):
//! - `util`: atomic writes, a stable hash
//! - `device`: the device a rank computes on (cpu, cuda), the passes' dtype, the kernels
//! - `comm`: collectives (the `Comm` trait, backends incl. NCCL in the CUDA build, mesh,
//!   the counting layer and tally, the link model)
//! - `tp`: tensor-parallel maths over them (f/g, parallel linears, vocab-parallel
//!   embedding and loss, the parameter registry)
//! - `ops`: linears, norms, activations, attention, loss: portable and fused kernels
//!   (CPU; GPU attention in the CUDA build)
//! - `blocks`: the t / s / p blocks and the pattern parser
//! - `model`: GPT-2 and presets
//! - `data`: datasets and loaders
//! - `config`: the run configuration, its defaults and checks
//! - `run_dir`: the typed reader/writer of a run directory
//! - `train`: the Trainer, the orchestrator, launchers, bench
//! - `sweep`, `plot`: grids of runs and their plots

pub mod alloc;
pub mod analysis;
pub mod blocks;
pub mod comm;
pub mod config;
pub mod data;
pub mod device;
pub mod error;
pub mod launch;
pub mod model;
pub mod ops;
pub mod plot;
pub mod run_dir;
pub mod sweep;
pub mod tools;
pub mod tp;
pub mod train;
pub mod util;
