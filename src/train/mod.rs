//! Training one rank: the [`trainer::Trainer`] (step, evaluate, save/restore) and what it
//! uses (gradients, AdamW, schedule), the evaluation over a whole split, text generation,
//! and the records a rank keeps. Launching ranks and running a job is `launch`; the
//! tools built on trained checkpoints are `tools`.
//!
//! The leaf types (`record`, `context`, `hooks`, `compute_clock`) import nothing else of `train/`.

pub mod batches;
pub mod bucket_cap;
pub mod compute_clock;
pub mod context;
pub mod full_eval;
pub mod generate;
pub mod grad_buckets;
pub mod grads;
pub mod hooks;
pub mod host_sums;
pub mod memory;
pub mod optimizer;
pub mod record;
pub mod schedule;
pub mod trainer;
