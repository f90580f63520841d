//! The Hugging Face format, out and in: GPT-2's own names and config where a layout is
//! GPT-2 (`format`), a modelling file of ours that transformers loads where it is not
//! (`remote`), and the export folder with the dataset's tokenizer beside the weights
//! (`export`). A file format, not the model: the model is `model/`.

pub mod export;
pub mod format;
pub mod remote;
