//! tp-harness: communication-efficient tensor parallelism of GPT-2 on candle.
//!
//! - `tp`: communication (Comm trait, backends, mesh, tally, f/g, parallel linears)
//! - `ops`: element-wise and normalisation ops (the place for fused kernels)
//! - `blocks`: the t / s / p blocks and the pattern parser
//! - `model`: GPT-2 and presets
//! - `data`: datasets and loaders
//! - `train`: configuration, optimiser, the rank program, launchers and run outputs

pub mod alloc;
pub mod blocks;
pub mod data;
pub mod error;
pub mod model;
pub mod ops;
pub mod plot;
pub mod sweep;
pub mod tp;
pub mod train;
