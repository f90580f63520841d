//! Datasets: preparation into `datasets/<name>/`, the char vocabulary, and loaders that
//! shard each global batch by data-parallel rank.

pub mod loader;
pub mod prepare;
pub mod source;
pub mod vocab;

pub use loader::{Batcher, Dataset, Split, EVAL_STREAM};
pub use prepare::{data_root, prepare, Meta, DATASETS};
pub use vocab::CharVocab;
