//! The environment switches a run reads (`TP_*`): fault hooks for the tests, and knobs
//! that change kernels, speed or placement. Each is a deliberate act for a measurement,
//! never part of a plain run, so one set by accident in a shell would change results
//! silently: the run names every one that is set on its first line of output, and its
//! `summary.json` records them (`environment`). Data-location variables (`TP_DATA_DIR`,
//! `TP_SHARED_DATASETS`, `TP_DATA_URL_BASE`) change where data is found, not what a run
//! computes (the data's fingerprint is recorded), and are not listed.

/// Every switch a run reads, with what it does (for the line that names them).
pub const SWITCHES: [(&str, &str); 15] = [
    ("TP_INJECT_FAULT", "fails a rank at a step"),
    ("TP_INJECT_NAN", "poisons a step's loss"),
    ("TP_DUMP_PARAMS", "writes each rank's weights at the end"),
    ("TP_STEP_PAUSE_MS", "pauses after every step"),
    ("TP_CHECKPOINT_PAUSE_MS", "pauses inside checkpoint writes"),
    ("TP_SIMD", "caps the CPU kernels' SIMD level"),
    ("TP_MATMUL", "overrides the matmul key (gemm or blas)"),
    ("TP_BLAS", "names the BLAS library for matmul: blas"),
    ("TP_ONE_RANK_AT_A_TIME", "runs the ranks in turns"),
    ("TP_MPI_COMM_THREAD", "moves MPI progress to a thread"),
    ("TP_MPI_POLL_US", "sets MPI's polling interval"),
    ("TP_CUDA_POOL", "sets the GPU memory pool's policy"),
    ("TP_CUDA_EVENTS", "sets cudarc's event tracking"),
    (
        "TP_CUDA_OFF",
        "turns new GPU paths back to what they replaced",
    ),
    (
        "TP_SUBNORMALS",
        "keeps subnormal floats (keep) instead of flushing them",
    ),
];

/// The switches set in the environment `get` reads, as `NAME=value`, in [`SWITCHES`]'
/// order.
pub fn set_switches(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    SWITCHES
        .iter()
        .filter_map(|(name, _)| Some(format!("{name}={}", get(name)?)))
        .collect()
}

/// The line naming them, if any is set.
pub fn announcement(set: &[String]) -> Option<String> {
    (!set.is_empty()).then(|| {
        format!(
            "tp-train: note: set in the environment: {} — the harness's test and measurement switches, which change what or how fast this run computes (unset them for a plain run; recorded in summary.json)",
            set.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_switches_are_named_and_other_variables_are_not() {
        let env = |k: &str| match k {
            "TP_INJECT_NAN" => Some("3".to_string()),
            "TP_SIMD" => Some("avx2".to_string()),
            _ => None,
        };
        let set = set_switches(env);
        assert_eq!(set, ["TP_INJECT_NAN=3", "TP_SIMD=avx2"]);
        let line = announcement(&set).unwrap();
        assert!(line.contains("TP_INJECT_NAN=3, TP_SIMD=avx2"), "{line}");
        assert_eq!(announcement(&[]), None);
    }

    /// Every `TP_*` variable the code reads is a switch here or a data location: a new
    /// one cannot be added without deciding which (read from the sources).
    #[test]
    fn every_variable_the_code_reads_is_listed_or_a_data_location() {
        let data = [
            "TP_DATA_DIR",
            "TP_SHARED_DATASETS",
            "TP_DATA_URL_BASE",
            "TP_PLOT_FONT",
        ];
        // Read by tests alone (never by a run): whether the test script requires a BLAS.
        let tests_only = ["TP_TEST_BLAS"];
        // Set by the build (lab/build.rs), read when compiling, never from a run's
        // environment: the source a binary was built from.
        let build_time = ["TP_BUILD"];
        // Both crates' sources: the lab's and the engine's (the repository's src/).
        let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut stack = vec![lab.join("src"), lab.join("../src")];
        let mut found = std::collections::BTreeSet::new();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for part in text.split('"').skip(1).step_by(2) {
                        if part.starts_with("TP_")
                            && part.len() > 3
                            && part
                                .chars()
                                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                        {
                            found.insert(part.to_string());
                        }
                    }
                }
            }
        }
        for v in found {
            assert!(
                SWITCHES.iter().any(|(n, _)| *n == v)
                    || data.contains(&v.as_str())
                    || tests_only.contains(&v.as_str())
                    || build_time.contains(&v.as_str()),
                "{v} is read by the code but neither a switch nor a data location"
            );
        }
    }
}
