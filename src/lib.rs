//! tp-harness: communication-efficient tensor parallelism of GPT-2 on candle.
//!
//! The modules, top first; each imports only those below it (`docs/architecture.md`,
//! held by `tests/it/layering/`):
//! - `sweep`, `plot`: grids of runs; drawing what `analysis` computes
//! - `tools`: evaluation, sampling, the SPD scan, HF import, the benchmark
//! - `launch`: per-process setup, the threads and MPI launchers, rank orchestration
//! - `analysis`: medians, replicate statistics, step and compute time, time on a link
//! - `train`: the Trainer (step, evaluate, save/restore), AdamW, schedule, generation
//! - `run_dir`: the typed reader/writer of a run directory
//! - `config`: the run configuration, presets, validation
//! - `model`: GPT-2 from a pattern, the Hugging Face format
//! - `data`: tokenizers, datasets, loaders sharded by DP rank
//! - `blocks`: the t / s / p / l blocks and the pattern parser
//! - `tp`: TP maths for any model (f/g, parallel linears, vocab-parallel loss)
//! - `comm`: the `Comm` trait, threads / MPI / NCCL backends, mesh, tally, link model
//! - `ops`: kernels (fused CPU per SIMD level, CUDA, portable)
//! - `device`, `error`, `util`, `alloc`: the device and kernels in use, user errors,
//!   small helpers, the allocator

pub mod alloc;
pub mod analysis;
pub mod blocks;
pub mod comm;
pub mod config;
pub mod data;
pub mod device;
pub mod error;
pub mod hf;
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
