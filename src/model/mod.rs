//! GPT-2 built from a pattern of t/s/p/l blocks, and the Hugging Face format.

pub mod config;
pub mod gpt;
pub mod hf;
pub mod hf_export;
pub mod hf_remote;

pub use config::ModelConfig;
pub use gpt::Gpt;
