//! The names of a run directory's files, where every part of `run_dir` finds them.

pub const CONFIG_FILE: &str = "config.yaml";
pub const COMM_FILE: &str = "comm.json";
pub const SUMMARY_FILE: &str = "summary.json";
pub const SAMPLE_FILE: &str = "sample.txt";
pub const SCAN_FILE: &str = "scan.json";
