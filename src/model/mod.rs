//! GPT-2 built from a pattern of t/s/p/l blocks (the Hugging Face format is `hf/`).

pub mod config;
pub mod gpt;

pub use config::ModelConfig;
pub use gpt::Gpt;
