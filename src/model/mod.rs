//! GPT-2 built from a pattern of t/s/p blocks, and its presets.

pub mod config;
pub mod gpt;
pub mod hf;

pub use config::{preset, ModelConfig, Preset, PRESETS};
pub use gpt::Gpt;
