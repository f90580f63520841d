//! tp-harness, the engine: communication-efficient tensor parallelism of GPT-2 on candle.
//! Everything a rank computes and communicates, and nothing of how a study is run,
//! recorded or drawn (that is the lab, the `tp-lab` crate in `lab/`, which builds on this
//! one; the compiler keeps this crate from reaching it).
//!
//! The modules, top first; each imports only those below it (`docs/architecture.md`,
//! held by `tests/it/layering/`):
//! - `train`: the Trainer (step, evaluate, its state out and in), AdamW, schedule,
//!   gradients and their buckets, generation
//! - `model`: GPT-2 from a pattern of blocks
//! - `blocks`: the t / s / p / l blocks and the pattern parser
//! - `tp`: TP maths for any model (f/g, parallel linears, vocab-parallel loss)
//! - `comm`: the `Comm` trait, threads / MPI / NCCL backends, mesh, tally, link model
//! - `ops`: kernels (fused CPU per SIMD level, CUDA, portable)
//! - `device`, `error`, `util`: the device and kernels in use, user errors, small helpers

pub mod blocks;
pub mod comm;
pub mod device;
pub mod error;
pub mod model;
pub mod ops;
pub mod tp;
pub mod train;
pub mod util;
