//! Running a training job: what each process sets up, the launchers (ranks as threads of
//! one process, or MPI processes), the one orchestrator every launcher hands its rank
//! contexts to, rank 0's console and closing reports, and the run as a whole.
//!
//! Imports flow one way: `run` -> launchers (`threads`, `mpi`) -> `orchestrate` -> the
//! Trainer (`train`); `job` prepares and closes a job for every launcher.

pub mod backend;
pub mod closing;
pub mod console;
pub mod job;
pub mod launcher_env;
pub mod lifecycle;
pub mod metrics;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod orchestrate;
pub mod outcome;
pub mod outputs;
pub mod report;
pub mod run;
pub mod run_trainer;
pub mod switches;
pub mod threads;
