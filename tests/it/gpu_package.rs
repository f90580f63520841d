//! What goes to a lent GPU machine, checked here where no GPU is: `gpu-check.sh`'s modes
//! fit one command of 10 minutes (their parts' time limits, summed, within the budget)
//! and return at most the 8 files such a machine gives back; the tracked tree leaves
//! room under the 64 MiB that travels there for `dist/cuda` (~27 MB with Open MPI's
//! wheel; the study's kept logs are compressed to leave it).

use crate::common::*;
use std::path::Path;

#[test]
fn each_gpu_check_mode_plans_within_its_budget_and_returns_two_files() {
    let repo = Path::new(crate::common::REPO);
    for mode in ["first", "follow", "diag", "profile", "verify"] {
        let d = scratch(&format!("gpu-check-{mode}"));
        let out = d.join("out");
        let o = std::process::Command::new("bash")
            .arg(repo.join("scripts/cuda/gpu-check.sh"))
            .args([mode, "--dry-run"])
            .env("OUT", &out)
            .env("TP_GPU_WORK", d.join("work"))
            .output()
            .unwrap();
        assert_ok(&o);
        let text = String::from_utf8_lossy(&o.stdout);
        let planned: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("planned: "))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{mode}: no plan\n{text}"));
        assert!(planned <= 570, "{mode}: {planned} s planned\n{text}");
        if mode == "verify" {
            // Every part of an independent check is in its one call's plan.
            for part in [
                "tests",
                "default",
                "bits-sppp-tp2",
                "bits-llll-tp2",
                "bits-tttt-tp1xdp2",
                "mpi-sppp-tp2",
                "sanitize-memcheck",
                "sanitize-racecheck",
                "sanitize-initcheck",
                "speed",
            ] {
                assert!(
                    text.contains(&format!("- plan: {part}, at most ")),
                    "{part}\n{text}"
                );
            }
        }
        let mut files: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                format!("gpu-check-{mode}.md"),
                format!("gpu-check-{mode}.tar.gz")
            ]
        );
    }
    let o = std::process::Command::new("bash")
        .arg(repo.join("scripts/cuda/gpu-check.sh"))
        .arg("all")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "an unknown mode is refused");
}

#[test]
fn the_tracked_tree_leaves_room_for_the_gpu_package() {
    let repo = Path::new(crate::common::REPO);
    let o = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo)
        .output()
        .unwrap();
    if !o.status.success() {
        return; // not a git checkout (a source archive): nothing travels from it
    }
    let bytes: u64 = o
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| std::fs::metadata(repo.join(String::from_utf8_lossy(p).as_ref())).ok())
        .map(|m| m.len())
        .sum();
    assert!(
        bytes < 35 << 20,
        "the tracked tree is {} MiB: with dist/cuda (~27 MB) it must stay under the 64 MiB a GPU machine takes",
        bytes >> 20
    );
}

/// The profile mode's kernel table: ncu's CSV in either layout (a metric column, or
/// metric name/unit/value rows, in ns or us), the program's own lines skipped, time summed
/// per kernel and launch shape, largest first.
#[test]
fn the_ncu_summary_sums_kernel_time_by_kernel_and_launch_shape() {
    let repo = Path::new(crate::common::REPO);
    let d = scratch("ncu-summary");
    let raw = concat!(
        "tp-train: a line of the program's own\n",
        "\"ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"gpu__time_duration.sum\"\n",
        "\"\",\"\",\"\",\"\",\"ns\"\n",
        "\"0\",\"fast_sum_f64\",\"(1024, 1, 1)\",\"(1, 1, 1)\",\"8,500,000\"\n",
        "\"1\",\"fast_sum_f64\",\"(1024, 1, 1)\",\"(1, 1, 1)\",\"1500000\"\n",
        "\"2\",\"gemm_bf16\",\"(128, 1, 1)\",\"(132, 1, 1)\",\"2000000\"\n",
    );
    let details = concat!(
        "\"ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n",
        "\"0\",\"gemm_bf16\",\"(128, 1, 1)\",\"(132, 1, 1)\",\"gpu__time_duration.sum\",\"usecond\",\"3000\"\n",
        "\"0\",\"gemm_bf16\",\"(128, 1, 1)\",\"(132, 1, 1)\",\"sm__throughput\",\"%\",\"90\"\n",
    );
    let run_with = |name: &str, text: &str, extra: &[&str]| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        let o = std::process::Command::new("python3")
            .arg(repo.join("scripts/cuda/ncu-summary.py"))
            .arg(&p)
            .args(extra)
            .output()
            .unwrap();
        assert_ok(&o);
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let run = |name: &str, text: &str| run_with(name, text, &[]);
    let t = run("raw.log", raw);
    assert!(t.contains("3 kernel launches, 12.0 ms"), "{t}");
    let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(
        rows,
        [
            "| `fast_sum_f64` | (1, 1, 1) | (1024, 1, 1) | 2 | 10.00 | 83.3% |",
            "| `gemm_bf16` | (132, 1, 1) | (128, 1, 1) | 1 | 2.00 | 16.7% |"
        ]
    );
    // Two profiled steps: every figure per step (calls too), shares unchanged.
    let t = run_with("raw2.log", raw, &["--steps", "2"]);
    assert!(
        t.contains("2 kernel launches a step, 6.0 ms of GPU time a step"),
        "{t}"
    );
    assert!(
        t.contains("| `fast_sum_f64` | (1, 1, 1) | (1024, 1, 1) | 1 | 5.00 | 83.3% |"),
        "{t}"
    );
    let t = run("details.log", details);
    assert!(t.contains("1 kernel launch, 3.0 ms"), "{t}");
    let empty = d.join("empty.log");
    std::fs::write(&empty, "ncu: no kernels were profiled\n").unwrap();
    let o = std::process::Command::new("python3")
        .arg(repo.join("scripts/cuda/ncu-summary.py"))
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no CSV rows"));
}
