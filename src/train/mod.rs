//! Training: the [`trainer::Trainer`] (step, evaluate, save/restore) and what it uses
//! (gradients, AdamW, schedule), the one orchestrator every launcher hands its rank
//! contexts to, the launchers (threads, MPI), and the run as a whole.
//!
//! Imports flow one way: `run` -> launchers -> `orchestrate` -> `trainer` -> parts; the
//! leaf types (`record`, `context`, `faults`) import nothing else of `train/`.

pub mod bench;
pub mod console;
pub mod context;
pub mod eval_run;
pub mod faults;
pub mod full_eval;
pub mod generate;
pub mod grads;
pub mod import;
pub mod job;
pub mod launch;
#[cfg(feature = "mpi")]
pub mod launch_mpi;
pub mod memory;
pub mod optimizer;
pub mod orchestrate;
pub mod record;
pub mod report;
pub mod run;
pub mod sample;
pub mod scan;
pub mod schedule;
pub mod trainer;
