//! The names of a run directory's files, where every part of `run_dir` finds them.

pub const CONFIG_FILE: &str = "config.yaml";
pub const COMM_FILE: &str = "comm.json";
pub const SUMMARY_FILE: &str = "summary.json";
pub const SAMPLE_FILE: &str = "sample.txt";
pub const SCAN_FILE: &str = "scan.json";
/// Written where training stopped on a non-finite loss or gradient norm: a run that
/// diverged, which a sweep takes as that point's outcome (a learning rate too high), not
/// as a failure to retry.
pub const DIVERGED_FILE: &str = "diverged.json";
