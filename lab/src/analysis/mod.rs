//! Measurement: every figure a researcher reads, computed once. Typed run records come
//! from `run_dir`; here are what is made of them — the median and replicate statistics
//! (`stats`), step, communication and compute time and time on a link (`timing`), runs'
//! loss curves and replicate groups (`runs`), and the link model's calibration against
//! real links (`calibration`), the table of runs on a modelled link (`on_link`), and a
//! study's loss penalty of each pattern against its setting's baseline (`penalty`) and
//! how it changes along the study's axes (`penalty_change`), arranged axis by axis
//! (`penalty_axis`), and where and how long its
//! settings trained (`penalty_provenance`); a run's typed identity in a study (`variant`:
//! its layout and compression; `setting`: the rest of its configuration), and the one
//! table type every report renders to markdown and CSV (`table`); tuned studies, each
//! layout at its own best learning rate (`tuning`), the values its grid tries next
//! (`tuning_grid`), and what a finer grid could still gain each (`tuning_between`).
//! `plot` only draws these; `sweep` and the launcher's closing summary compute through
//! them.

pub mod calibration;
pub mod on_link;
pub mod penalty;
pub mod penalty_axis;
pub mod penalty_change;
pub mod penalty_provenance;
pub mod penalty_table;
pub mod plan;
pub mod runs;
pub mod setting;
pub mod stats;
pub mod table;
pub mod timing;
pub mod tuned_study;
pub mod tuning;
pub mod tuning_between;
pub mod tuning_grid;
pub mod tuning_record;

pub use runs::{merge_replicates, ReplicateKey, RunCurves};
pub use stats::{median, paired_differences, Replicates};
pub use table::Table;
pub use timing::{parse_link, step_ms, Link, StepTiming};
