//! Measurement: every figure a researcher reads, computed once. Typed run records come
//! from `run_dir`; here are what is made of them — the median and replicate statistics
//! (`stats`), step, communication and compute time and time on a link (`timing`), runs'
//! loss curves and replicate groups (`runs`), and the link model's calibration against
//! real links (`calibration`), the table of runs on a modelled link (`on_link`), and a
//! study's loss penalty of each pattern against its setting's baseline (`penalty`) and
//! how it changes along the study's axes (`penalty_change`), and where and how long its
//! settings trained (`penalty_provenance`).
//! `plot` only draws these; `sweep` and the launcher's closing summary compute through
//! them.

pub mod calibration;
pub mod on_link;
pub mod penalty;
pub mod penalty_change;
pub mod penalty_provenance;
pub mod runs;
pub mod stats;
pub mod timing;

pub use runs::{merge_replicates, ReplicateKey, RunCurves};
pub use stats::{median, paired_differences, Replicates};
pub use timing::{parse_link, step_ms, Link, StepTiming};
