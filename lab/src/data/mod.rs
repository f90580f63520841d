//! Datasets: preparation into `datasets/<name>/`, the char vocabulary, and loaders that
//! shard each global batch by data-parallel rank.

pub mod hf_tokenizer;
pub mod loader;
pub mod prepare;
pub mod source;
pub mod tokenizer;
pub mod vocab;

pub use loader::{Batcher, Dataset, Split, EVAL_STREAM};
pub use prepare::{data_root, prepare, prepare_text, Meta, DATASETS, TEXT};
pub use tokenizer::{
    TextStream, TextTokenizer, Tokenizer, CHAR_TEXT_MAX_BYTES, GPT2_EOT, GPT2_VOCAB,
};
pub use vocab::CharVocab;
