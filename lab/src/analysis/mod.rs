//! Measurement of runs: every per-run figure a researcher reads, computed once. Typed run
//! records come from `run_dir`; here are what is made of them: the median and replicate
//! statistics (`stats`), step, communication and compute time and a run's link
//! (`timing`), runs' loss curves and replicate groups (`runs`), and the one table type
//! every report renders to markdown and CSV (`table`). What a study makes of many runs
//! is `study/`; the cluster planner is `planner/`.

pub mod runs;
pub mod stats;
pub mod table;
pub mod timing;

pub use runs::{merge_replicates, ReplicateKey, RunCurves};
pub use stats::{median, paired_differences, Replicates};
pub use table::Table;
pub use timing::{parse_link, step_ms, Link, StepTiming};
