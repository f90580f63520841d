//! Inputs a demanding user (or a typo) gives: each is one line on stderr and exit code 2,
//! and nothing is written: no run directory, no half-prepared dataset. A full disk and a
//! read-only place are said the same way, naming the file and the fix, and a run stopped
//! by a full disk resumes once there is room.

use crate::common::{assert_ok, command, one_clear_error, scratch, with_test_data};
use std::path::Path;
use std::process::Output;

fn tp_train(dir: &Path, data: &Path, args: &[&str]) -> Output {
    command("tp-train", dir)
        .env("TP_DATA_DIR", data)
        .args(args)
        .arg("--quiet")
        .output()
        .unwrap()
}

/// Nothing but the data folder (and what the test put there) is left in `dir`, and the
/// data folder holds no prepared text dataset.
fn nothing_written(dir: &Path, data: &Path, keep: &[&str]) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        assert!(
            e.path() == data || keep.contains(&name.as_str()),
            "{name} was written in {}",
            dir.display()
        );
    }
    if let Ok(entries) = std::fs::read_dir(data) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            assert!(
                !name.starts_with("text-"),
                "{name} was left in {}",
                data.display()
            );
        }
    }
}

#[test]
fn hostile_patterns_sizes_sample_lengths_and_text_paths_are_one_line_exit_2_and_write_nothing() {
    let d = scratch("hostile");
    let data = d.join("data");
    std::fs::write(d.join("latin1.txt"), b"caf\xe9 ".repeat(100)).unwrap();
    std::fs::write(d.join("tiny.txt"), "two words").unwrap();
    std::fs::create_dir_all(d.join("corpus")).unwrap();
    std::fs::write(d.join("corpus/a.txt"), "some text ".repeat(50)).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("/dev/zero", d.join("corpus/zero")).unwrap();
    let keep = ["latin1.txt", "tiny.txt", "corpus"];
    let many_t = "t".repeat(10_000);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--pattern", "9999x(9999x(9999x(t)))"],
            "the pattern expands to more than 1000 layers",
        ),
        (
            vec!["--pattern", &many_t],
            "the pattern expands to more than 1000 layers",
        ),
        (
            vec!["--set", "sample_tokens=99999999999"],
            "sample_tokens must be at most 10000",
        ),
        (
            vec!["--pattern", "1000xt", "--set", "n_embd=4096"],
            "this run needs at least",
        ),
        (
            vec!["--set", "dataset=text", "--set", "text_path=/dev/zero"],
            "text_path /dev/zero is not a regular file or a folder",
        ),
        (
            vec!["--set", "dataset=text", "--set", "text_path=corpus"],
            "corpus/zero is not a regular file or a folder",
        ),
        (
            vec!["--set", "dataset=text", "--set", "text_path=latin1.txt"],
            "latin1.txt is not readable UTF-8 text",
        ),
        (
            vec!["--set", "dataset=text", "--set", "text_path=tiny.txt"],
            "too little to train on",
        ),
        (
            vec!["--set", "dataset=text", "--set", "text_path=missing.txt"],
            "text_path missing.txt does not exist",
        ),
    ];
    for (args, needle) in cases {
        let mut all = args.clone();
        all.extend(["--out", "run"]);
        let o = tp_train(&d, &data, &all);
        one_clear_error(&o, needle);
        nothing_written(&d, &data, &keep);
    }
    let o = command("tp-sample", &d)
        .args(["run", "--tokens", "99999999999"])
        .output()
        .unwrap();
    one_clear_error(&o, "--tokens must be at most 1000000");
}

#[test]
fn a_pattern_of_1000_layers_the_limit_trains_and_resumes_at_tp_4() {
    // The deepest model a pattern allows: its backward pass and its graph's drop recurse
    // per node, so this proves the rank threads' stacks hold it.
    let d = scratch("deep");
    let args = [
        "--pattern",
        "1000xt",
        "--tp",
        "4",
        "--set",
        "n_embd=16",
        "--set",
        "n_head=4",
        "--set",
        "block_size=8",
        "--set",
        "batch_size=2",
        "--set",
        "max_iters=2",
        "--set",
        "eval_interval=0",
        "--set",
        "final_eval=sampled",
        "--set",
        "sample_tokens=4",
        "--out",
        "run",
        "--quiet",
    ];
    assert_ok(&command("tp-train", &d).args(args).output().unwrap());
    let o = command("tp-train", &d)
        .args(["--resume", "run", "--set", "max_iters=3", "--quiet"])
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(d.join("run/summary.json").exists());
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `script` (sh) in a mount namespace of its own, where it may mount a tmpfs.
fn in_mount_namespace(dir: &Path, script: &str) -> Output {
    with_test_data(
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", script])
            .current_dir(dir),
    )
    .env("TP_TRAIN", env!("CARGO_BIN_EXE_tp-train"))
    .output()
    .unwrap()
}

#[test]
fn a_full_disk_and_a_read_only_out_are_one_line_naming_the_file_and_the_fix_and_the_run_resumes_when_there_is_room(
) {
    if !is_root() {
        println!("skipped: mounting a small tmpfs needs root (CI runs as root)");
        return;
    }
    let d = scratch("disk-full");
    std::fs::create_dir_all(d.join("small")).unwrap();
    std::fs::create_dir_all(d.join("ro")).unwrap();
    // 40 steps, checkpoints of ~10 MB every 10: the first one cannot fit in 1 MB.
    let script = r#"
set -u
mount -t tmpfs -o size=1m tmpfs small || exit 90
mount -t tmpfs -o ro tmpfs ro || exit 90
"$TP_TRAIN" --quiet --out small/run --set max_iters=40 --set checkpoint_interval=10 --set log_interval=1 2>full.err >/dev/null
echo "full=$?"
ls small/run/checkpoints > full.ls
mount -o remount,size=200m small
"$TP_TRAIN" --quiet --resume small/run 2>resume.err >/dev/null
echo "resumed=$?"
cp small/run/log.jsonl resumed.log
"$TP_TRAIN" --quiet --out ro/run --set max_iters=3 2>ro.err >/dev/null
echo "ro=$?"
"#;
    let o = in_mount_namespace(&d, script);
    let out = String::from_utf8_lossy(&o.stdout);
    if o.status.code() == Some(90) || out.is_empty() {
        println!(
            "skipped: this sandbox cannot mount a tmpfs ({})",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        return;
    }
    let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
    assert!(out.contains("full=2"), "{out}\n{}", read("full.err"));
    let err = read("full.err");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot write small/run/")
            && err.contains("the disk is full: free space there")
            && err.contains("--resume"),
        "{err}"
    );
    assert!(!err.contains("os error"), "{err}");
    // The half-written checkpoint gave its space back.
    assert!(!read("full.ls").contains(".tmp-"), "{}", read("full.ls"));
    assert!(out.contains("resumed=0"), "{out}\n{}", read("resume.err"));
    let steps: Vec<u64> = read("resumed.log")
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, (0..=40).collect::<Vec<_>>());
    assert!(out.contains("ro=2"), "{out}\n{}", read("ro.err"));
    let err = read("ro.err");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot create run directory ro/run: the file system is read-only"),
        "{err}"
    );
}
