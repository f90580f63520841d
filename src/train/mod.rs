//! Training: configuration, gradients, optimiser, schedule, the rank program, launchers
//! and run outputs.

pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod grads;
pub mod launch;
#[cfg(feature = "mpi")]
pub mod launch_mpi;
pub mod memory;
pub mod optimizer;
pub mod rank;
pub mod report;
pub mod run;
pub mod run_dir;
pub mod sample;
pub mod schedule;
