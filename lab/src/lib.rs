//! tp-lab: the lab around the engine (`tp_harness`): how a run is configured, launched,
//! recorded, measured, swept, planned and drawn, and the binaries a user runs.
//!
//! The modules, top first; each imports only those below it (`docs/architecture.md`,
//! held by `tests/it/layering/`); any of them may use the engine:
//! - `sweep`, `plot`: grids of runs; drawing what `analysis` computes
//! - `tools`: evaluation, sampling, the SPD scan, HF import, the planner, the benchmark
//! - `launch`: per-process setup, the threads and MPI launchers, rank orchestration
//! - `analysis`: medians, replicate statistics, step and compute time, time on a link
//! - `hf`: the Hugging Face format, out and in
//! - `run_dir`: the typed reader/writer of a run directory
//! - `config`: the run configuration, presets, validation
//! - `data`: tokenizers, datasets, loaders sharded by DP rank
//! - `alloc`: the binaries' allocator

pub mod alloc;
pub mod analysis;
pub mod bench;
pub mod config;
pub mod data;
pub mod hf;
pub mod launch;
pub mod planner;
pub mod plot;
pub mod run_dir;
pub mod scan;
pub mod study;
pub mod sweep;
pub mod tools;
