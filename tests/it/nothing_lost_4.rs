//! The fourth fault probe's cases (issue 65), each as the probe tried it, each failing
//! before its fix: exports that wrote through symbolic links or left a mixture of two
//! models after a kill; imports that read outside their folder.

use crate::common::*;
use std::path::Path;
use std::time::Duration;

fn train(d: &Path, out: &str, extra: &[&str]) {
    let mut args = vec![
        "--quiet",
        "--set",
        "max_iters=2",
        "--set",
        "eval_interval=0",
        "--set",
        "sample_tokens=0",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    assert_ok(&bin("tp-train", d, &args, &[]));
}

fn export(d: &Path, run: &str, out: &str) -> std::process::Output {
    bin("tp-export", d, &[run, "--out", out], &[])
}

/// A run's `export-hf` that is a link to a folder outside the run, a `config.json` link
/// in an export folder, and a `.tp-export` mark that is a link: each refused with one
/// line, and the files outside untouched.
#[test]
fn an_export_never_writes_through_a_symbolic_link() {
    let d = scratch("lost4-export-links");
    train(&d, "run", &[]);
    std::fs::create_dir(d.join("outside")).unwrap();
    std::os::unix::fs::symlink(d.join("outside"), d.join("run/export-hf")).unwrap();
    let o = bin("tp-export", &d, &["run"], &[]);
    one_clear_error(&o, "is a symbolic link");
    assert_eq!(std::fs::read_dir(d.join("outside")).unwrap().count(), 0);

    // An export folder of ours with a config.json planted as a link to a file elsewhere.
    assert_ok(&export(&d, "run", "hf"));
    std::fs::write(d.join("victim.txt"), "precious").unwrap();
    std::fs::remove_file(d.join("hf/config.json")).unwrap();
    std::os::unix::fs::symlink(d.join("victim.txt"), d.join("hf/config.json")).unwrap();
    one_clear_error(&export(&d, "run", "hf"), "symbolic link config.json");
    assert_eq!(
        std::fs::read_to_string(d.join("victim.txt")).unwrap(),
        "precious"
    );

    // A mark that is a link does not make a downloaded model's folder ours.
    std::fs::create_dir(d.join("theirs")).unwrap();
    std::fs::write(d.join("theirs/config.json"), "{}").unwrap();
    std::fs::write(d.join("mark"), "").unwrap();
    std::os::unix::fs::symlink(d.join("mark"), d.join("theirs/.tp-export")).unwrap();
    one_clear_error(&export(&d, "run", "theirs"), "already holds");
    assert_eq!(
        std::fs::read_to_string(d.join("theirs/config.json")).unwrap(),
        "{}"
    );
    // A user's own file in an export folder is not deleted by the next export.
    assert_ok(&export(&d, "run", "hf2"));
    std::fs::write(d.join("hf2/notes.md"), "mine").unwrap();
    one_clear_error(
        &export(&d, "run", "hf2"),
        "notes.md, which tp-export did not write",
    );
    assert_eq!(
        std::fs::read_to_string(d.join("hf2/notes.md")).unwrap(),
        "mine"
    );
}

/// The width a folder's config.json gives and the width of its weights.
fn widths(dir: &Path) -> (u64, usize) {
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let t =
        candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    (
        c["n_embd"].as_u64().unwrap(),
        t["transformer.wte.weight"].dims()[1],
    )
}

/// Re-exports of a wider model into a narrower one's folder, each killed at another
/// moment: the folder is always one whole export (config and weights of one model),
/// never the new weights beside the old config.
#[test]
fn a_re_export_killed_at_any_moment_leaves_one_whole_model() {
    let d = scratch("lost4-export-kill");
    train(&d, "narrow", &["--set", "n_embd=32"]);
    train(&d, "wide", &["--set", "n_embd=384", "--pattern", "8xt"]);
    assert_ok(&export(&d, "narrow", "hf"));
    for i in 0..16u64 {
        let mut child = command("tp-export", &d)
            .args(["wide", "--out", "hf"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(10 + 15 * i));
        let _ = child.kill();
        let _ = child.wait();
        let (config, weights) = widths(&d.join("hf"));
        assert_eq!(
            config as usize, weights,
            "kill {i}: a mixture of two models"
        );
        // Back to the narrow model for the next try.
        assert_ok(&export(&d, "narrow", "hf"));
        assert_eq!(widths(&d.join("hf")).1, 32);
    }
    // Nothing a killed export left beside the folder outlives the next export.
    let leftovers: Vec<String> = std::fs::read_dir(&*d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".hf."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A GPT-2 folder as transformers writes it, exported from a run with biases.
fn gpt2_folder(d: &Path, out: &str) {
    train(d, "gpt2-run", &["--pattern", "tt", "--set", "bias=true"]);
    assert_ok(&export(d, "gpt2-run", out));
}

/// `tp-import` of `dir`, which must answer within ten seconds (a FIFO would block it).
fn import(d: &Path, dir: &str) -> std::process::Output {
    let mut child = command("tp-import", d)
        .args([dir, "--out", "imported", "--dataset", "shakespeare_char"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("tp-import {dir} did not answer within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn fifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A shard index naming `../` or an absolute path, a shard linked to a file elsewhere or
/// to /dev/zero, and a FIFO as config.json or as a shard: each one line at once, nothing
/// read outside the folder, nothing imported.
#[test]
fn an_import_reads_only_plain_files_inside_its_folder() {
    let d = scratch("lost4-import-paths");
    gpt2_folder(&d, "hf");
    let index = |dir: &str, shard: &str| {
        std::fs::create_dir_all(d.join(dir)).unwrap();
        std::fs::copy(d.join("hf/config.json"), d.join(dir).join("config.json")).unwrap();
        let map = serde_json::json!({"weight_map": {"transformer.wte.weight": shard}});
        std::fs::write(
            d.join(dir).join("model.safetensors.index.json"),
            map.to_string(),
        )
        .unwrap();
    };
    std::fs::copy(
        d.join("hf/model.safetensors"),
        d.join("elsewhere.safetensors"),
    )
    .unwrap();
    index("up", "../elsewhere.safetensors");
    one_clear_error(&import(&d, "up"), "not a file name in that folder");
    let abs = d.join("elsewhere.safetensors");
    index("abs", abs.to_str().unwrap());
    one_clear_error(&import(&d, "abs"), "not a file name in that folder");
    index("linked", "model-1.safetensors");
    std::os::unix::fs::symlink(&abs, d.join("linked/model-1.safetensors")).unwrap();
    one_clear_error(&import(&d, "linked"), "symbolic link to a file outside");
    index("zero", "model-1.safetensors");
    std::os::unix::fs::symlink("/dev/zero", d.join("zero/model-1.safetensors")).unwrap();
    one_clear_error(&import(&d, "zero"), "outside the folder");
    index("fifo-shard", "model-1.safetensors");
    fifo(&d.join("fifo-shard/model-1.safetensors"));
    one_clear_error(&import(&d, "fifo-shard"), "not a regular file");
    std::fs::create_dir(d.join("fifo-config")).unwrap();
    std::fs::copy(
        d.join("hf/model.safetensors"),
        d.join("fifo-config/model.safetensors"),
    )
    .unwrap();
    fifo(&d.join("fifo-config/config.json"));
    one_clear_error(&import(&d, "fifo-config"), "not a regular file");
    assert!(!d.join("imported").exists());
    // An --out that is a dangling link: one line naming it, not "File exists (os error 17)".
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("imported")).unwrap();
    one_clear_error(
        &import(&d, "hf"),
        "which does not exist: name a real folder",
    );
    assert!(!d.join("nowhere").exists());
}

/// One stray tensor `transformer.h.999999999.ln_1.weight` beside a config claiming a
/// billion layers: one line naming the gap, at once, without building a billion names.
#[test]
fn a_stray_layer_number_is_a_gap_not_a_billion_layers() {
    let d = scratch("lost4-import-stray");
    gpt2_folder(&d, "hf");
    let dev = candle_core::Device::Cpu;
    let mut t = candle_core::safetensors::load(d.join("hf/model.safetensors"), &dev).unwrap();
    let w = t["transformer.h.0.ln_1.weight"].clone();
    t.insert("transformer.h.999999999.ln_1.weight".into(), w);
    candle_core::safetensors::save(&t, d.join("hf/model.safetensors")).unwrap();
    let config = d.join("hf/config.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    c["n_layer"] = 1_000_000_000u64.into();
    std::fs::write(&config, c.to_string()).unwrap();
    let started = std::time::Instant::now();
    let o = import(&d, "hf");
    one_clear_error(&o, "layer 2 and others are missing");
    assert!(started.elapsed() < Duration::from_secs(5));
}

fn plan(d: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--model", "gpt2", "--pattern", "3xsppp", "--out", "plan"];
    all.extend_from_slice(args);
    bin("tp-plan", d, &all, &[])
}

/// Rates, links and sizes that made tp-plan print inf, NaN or 0 ms (or wrap), and a run's
/// damaged compute record: each one line naming the value and its range; a very wide
/// model timed on this CPU answers instead of aborting on its allocation.
#[test]
fn the_planner_refuses_what_it_cannot_price_finitely_in_one_line() {
    let d = scratch("lost4-plan");
    for (args, says) in [
        (&["--device", "tflops:1e308"][..], "from 1e-6 to 1e6"),
        (
            &["--mfu", "0.4", "--link", "5e-324:1e308"],
            "from 1e-6 to 1e7",
        ),
        (&["--mfu", "0.4", "--link", "100:1e308"], "up to 1e7"),
        (
            &[
                "--mfu",
                "0.4",
                "--batch",
                "4294967296",
                "--block",
                "4294967296",
            ],
            "out of range: 1 to 16777216",
        ),
        (
            &["--mfu", "0.4", "--batch", "65536"],
            "tokens a step and rank",
        ),
        (
            &[
                "--mfu",
                "0.4",
                "--n-head",
                "1000000000000",
                "--n-embd",
                "1000000000000",
            ],
            "out of range",
        ),
        (&["--mfu", "1e308"], "got 1e308"),
    ] {
        one_clear_error(&plan(&d, args), says);
        assert!(!d.join("plan").exists(), "{args:?}: nothing written");
    }
    let wide = plan(
        &d,
        &["--device", "cpu", "--n-embd", "1048576", "--n-head", "16"],
    );
    assert_ok(&wide);
    // A run whose comm.json was damaged: its compute record is checked as input is.
    train(&d, "run", &[]);
    let comm = d.join("run/comm.json");
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&comm).unwrap()).unwrap();
    for bad in [
        serde_json::json!([0.0, 0.0]),
        serde_json::json!([-5.0, 1.0]),
        serde_json::json!([1e-320, 1e-320]),
        serde_json::json!([]),
        serde_json::json!([1e308, 1.0]),
    ] {
        let mut c = good.clone();
        c["compute"]["per_rank_ms"] = bad.clone();
        std::fs::write(&comm, c.to_string()).unwrap();
        let o = plan(&d, &["--device", "run", "--pattern", "12xt"]);
        one_clear_error(&o, "the record is damaged");
    }
}

/// A finished run whose summary.json holds an absurd final loss (negative, 1e308 after a
/// hand edit, 3e38): tp-plot and tp-plan --study stop with one line naming the record,
/// where the figure once showed `-3e38 ± inf`.
#[test]
fn an_absurd_loss_in_a_record_stops_the_figure_with_one_line() {
    let d = scratch("lost4-absurd-summary");
    train(&d, "run", &["--pattern", "12xt", "--set", "n_embd=32"]);
    let path = d.join("run/summary.json");
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for bad in [-0.5, 1e300, 3e38] {
        let mut s = good.clone();
        s["final_val_loss"] = bad.into();
        std::fs::write(&path, s.to_string()).unwrap();
        let o = bin("tp-plot", &d, &["run", "--out", "pics"], &[]);
        one_clear_error(&o, "is not a loss");
        let o = bin(
            "tp-plan",
            &d,
            &[
                "--model",
                "gpt2",
                "--pattern",
                "3xsppp",
                "--study",
                "run",
                "--mfu",
                "0.4",
            ],
            &[],
        );
        one_clear_error(&o, "the record is damaged");
    }
}

/// `tp-plot` into a folder on a nearly full disk (a small tmpfs): one line, and the
/// earlier good figure there is unchanged, no truncated one left in its place. Needs
/// root to mount (CI and this project's machines are); skipped otherwise.
#[test]
fn a_full_disk_leaves_the_earlier_figures_whole_and_says_so_in_one_line() {
    let d = scratch("lost4-full-disk");
    train(&d, "run", &[]);
    assert_ok(&bin("tp-plot", &d, &["run", "--out", "good"], &[]));
    let tiny = d.join("tiny");
    std::fs::create_dir(&tiny).unwrap();
    let png = std::fs::read(d.join("good/loss_curves.png")).unwrap();
    let size = png.len() + 256 * 1024;
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&tiny)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (not root)");
        return;
    }
    let _ = std::fs::write(tiny.join("loss_curves.png"), &png);
    // Fill what is left but a few KiB.
    let _ = std::fs::write(tiny.join("filler"), vec![0u8; 248 * 1024]);
    let o = bin("tp-plot", &d, &["run", "--out", "tiny"], &[]);
    let names: Vec<String> = std::fs::read_dir(&tiny)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let kept = std::fs::read(tiny.join("loss_curves.png")).unwrap();
    let _ = std::process::Command::new("umount").arg(&tiny).status();
    one_clear_error(&o, "the earlier figures there are unchanged");
    assert_eq!(kept, png, "the good figure was replaced");
    assert!(
        names.iter().all(|n| !n.contains(".tmp.")),
        "a temporary left behind: {names:?}"
    );
}

/// `TP_ONE_RANK_AT_A_TIME=banana`, `TP_MPI_POLL_US=banana` or `-1` and
/// `TP_MPI_COMM_THREAD=2` were taken silently; like every other `TP_*` switch they are
/// now one line naming the choices, before the run directory exists.
#[test]
fn garbage_in_the_mpi_and_turn_switches_is_refused_like_every_other() {
    let d = scratch("lost4-switches");
    for (var, value, says) in [
        (
            "TP_ONE_RANK_AT_A_TIME",
            "banana",
            "use 1 (ranks take turns) or 0",
        ),
        (
            "TP_MPI_POLL_US",
            "banana",
            "TP_MPI_POLL_US=banana is not a number",
        ),
        ("TP_MPI_POLL_US", "-1", "from 0 to 1000000"),
        (
            "TP_MPI_COMM_THREAD",
            "2",
            "TP_MPI_COMM_THREAD=2 is not a choice",
        ),
    ] {
        let o = bin(
            "tp-train",
            &d,
            &["--quiet", "--set", "max_iters=1", "--out", "run"],
            &[(var, value)],
        );
        one_clear_error(&o, says);
        assert!(!d.join("run").exists(), "{var}={value}: nothing made");
    }
}

/// `--init-from` a run on a character-tokenized text corpus with another dataset named:
/// the answer is about the data, which the user changed, not about `text_tokenizer`,
/// which this invocation never set.
#[test]
fn init_from_with_another_dataset_names_the_dataset_not_an_inherited_key() {
    let d = scratch("lost4-init-from-data");
    std::fs::create_dir(d.join("corpus")).unwrap();
    let text = std::fs::read_to_string(test_data_dir().join("shakespeare_char/input.txt"))
        .unwrap_or_else(|_| "To be, or not to be, that is the question.\n".repeat(5000));
    std::fs::write(d.join("corpus/a.txt"), &text[..text.len().min(200_000)]).unwrap();
    train(
        &d,
        "chars",
        &[
            "--set",
            "dataset=text",
            "--set",
            "text_path=corpus",
            "--set",
            "text_tokenizer=char",
        ],
    );
    let o = bin(
        "tp-train",
        &d,
        &[
            "--quiet",
            "--init-from",
            "chars",
            "--set",
            "dataset=names",
            "--out",
            "b",
        ],
        &[],
    );
    one_clear_error(&o, "its dataset is text but this run's is names");
    assert!(!d.join("b").exists());
}
