//! Nothing lost, nothing silently wrong, round 2: each way a second fault probe found to
//! lose or falsify data, reproduced as it did (32 wide, 40 steps, checkpoints every 10).

use crate::common::*;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tp_lab::run_dir::{read_summary, Checkpoint};

/// The probe's small run: `T` of the issue.
const T: [&str; 13] = [
    "--set",
    "n_embd=32",
    "--set",
    "eval_iters=2",
    "--set",
    "batch_size=4",
    "--set",
    "max_iters=40",
    "--set",
    "eval_interval=20",
    "--set",
    "checkpoint_interval=10",
    "--quiet",
];

fn train_t(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = T.to_vec();
    args.extend_from_slice(extra);
    bin("tp-train", dir, &args, &[])
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn export_into_a_checkpoint_or_over_anothers_model_is_refused_and_the_checkpoint_still_loads() {
    let d = scratch("lost-export");
    assert_ok(&train_t(&d, &["--pattern", "tttt", "--out", "run"]));
    let ck = d.join("run/checkpoints/step-000040");
    let before = bytes(&ck.join("model.safetensors"));
    for out in [
        "run/checkpoints/step-000040",
        "run/checkpoints",
        "run/checkpoints/step-000040/inner",
    ] {
        let o = bin("tp-export", &d, &["run", "--out", out], &[]);
        one_clear_error(&o, "lies inside the checkpoints of");
    }
    assert_eq!(bytes(&ck.join("model.safetensors")), before);
    Checkpoint::load(&ck).expect("the checkpoint still loads");
    // A folder holding someone else's model is not replaced...
    std::fs::create_dir_all(d.join("theirs")).unwrap();
    std::fs::write(d.join("theirs/model.safetensors"), b"their model").unwrap();
    let o = bin("tp-export", &d, &["run", "--out", "theirs"], &[]);
    one_clear_error(&o, "that tp-export did not write");
    assert_eq!(bytes(&d.join("theirs/model.safetensors")), b"their model");
    // ...while an export's own folder may be exported into again.
    assert_ok(&bin("tp-export", &d, &["run", "--out", "mine"], &[]));
    assert_ok(&bin("tp-export", &d, &["run", "--out", "mine"], &[]));
    // The same guard on every tool that writes where it is told.
    let o = bin("tp-plot", &d, &["run", "--out", "run/checkpoints/x"], &[]);
    one_clear_error(&o, "lies inside the checkpoints of");
    let o = train_t(&d, &["--out", "run/checkpoints/new-run"]);
    one_clear_error(&o, "lies inside the checkpoints of");
    assert!(!ck.join("new-run").exists() && !d.join("run/checkpoints/new-run").exists());
}

#[test]
fn a_latest_naming_another_runs_checkpoint_or_a_checkpoint_of_another_seed_is_refused_by_name() {
    let d = scratch("lost-latest");
    assert_ok(&train_t(&d, &["--out", "run"]));
    assert_ok(&train_t(&d, &["--out", "other", "--set", "seed=7"]));
    let latest = d.join("run/checkpoints/latest");
    std::fs::write(&latest, "../../other/checkpoints/step-000040\n").unwrap();
    let o = bin("tp-eval", &d, &["run"], &[]);
    one_clear_error(&o, "not a checkpoint of this run");
    let o = bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=50"],
        &[],
    );
    one_clear_error(&o, "not a checkpoint of this run");
    // A link inside the run that points out of it is no better.
    std::os::unix::fs::symlink(
        d.join("other/checkpoints/step-000040"),
        d.join("run/checkpoints/step-000099"),
    )
    .unwrap();
    std::fs::write(&latest, "step-000099\n").unwrap();
    let o = bin("tp-eval", &d, &["run"], &[]);
    one_clear_error(&o, "not a checkpoint of this run");
    std::fs::remove_file(d.join("run/checkpoints/step-000099")).unwrap();
    // Nor passed by hand.
    let o = bin(
        "tp-eval",
        &d,
        &["run", "--checkpoint", "other/checkpoints/step-000040"],
        &[],
    );
    one_clear_error(&o, "is not a checkpoint of run");
    // Another run's checkpoint copied into this run's folder: its seed gives it away.
    let copy = d.join("run/checkpoints/step-000050");
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(d.join("other/checkpoints/step-000040")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    std::fs::write(&latest, "step-000050\n").unwrap();
    let o = bin("tp-eval", &d, &["run"], &[]);
    one_clear_error(&o, "seed 7 (checkpoint) vs 1337");
    // Its own checkpoints still serve.
    std::fs::write(&latest, "step-000040\n").unwrap();
    assert_ok(&bin("tp-eval", &d, &["run"], &[]));
}

#[test]
fn an_empty_or_unreadable_latest_falls_back_to_the_newest_checkpoint() {
    let d = scratch("lost-latest-empty");
    assert_ok(&train_t(&d, &["--out", "run"]));
    let latest = d.join("run/checkpoints/latest");
    let want = String::from_utf8_lossy(&bin("tp-eval", &d, &["run"], &[]).stdout).to_string();
    assert!(want.contains("step 40"), "{want}");
    for damaged in [&b""[..], b"\n", b"\xff\xfe not utf-8"] {
        std::fs::write(&latest, damaged).unwrap();
        let o = bin("tp-eval", &d, &["run"], &[]);
        assert_ok(&o);
        assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    }
    // A directory where the file should be: the same.
    std::fs::remove_file(&latest).unwrap();
    std::fs::create_dir(&latest).unwrap();
    assert_ok(&bin("tp-eval", &d, &["run"], &[]));
}

/// A small corpus whose lines end in three `c`s: the same size for every letter.
fn corpus_text(c: char) -> String {
    (0..400)
        .map(|i| format!("line {i} of the corpus says {c}{c}{c}.\n"))
        .collect()
}

#[test]
fn an_edited_text_corpus_of_the_same_size_is_prepared_again() {
    let d = scratch("lost-corpus");
    let corpus = d.join("corpus.txt");
    std::fs::write(&corpus, corpus_text('a')).unwrap();
    let data = d.join("data");
    let env = [("TP_DATA_DIR", data.to_str().unwrap())];
    let run = |out: &str| {
        let mut args = T.to_vec();
        args.extend_from_slice(&[
            "--set",
            "dataset=text",
            "--set",
            "text_path=corpus.txt",
            "--set",
            "max_iters=2",
            "--set",
            "block_size=16",
            "--out",
            out,
        ]);
        bin("tp-train", &d, &args, &env)
    };
    assert_ok(&run("a"));
    let a = read_summary(&d.join("a")).unwrap().unwrap();
    // Same size, other words: "zzz" tokenizes differently from "aaa".
    let edited = corpus_text('z');
    assert_eq!(edited.len(), corpus_text('a').len());
    std::fs::write(&corpus, edited).unwrap();
    assert_ok(&run("z"));
    let z = read_summary(&d.join("z")).unwrap().unwrap();
    assert_ne!(a.data_sha256, z.data_sha256, "the stale tokens were used");
}

#[test]
fn a_resume_on_changed_data_is_refused_unless_accepted_and_then_noted_in_log_and_summary() {
    let d = scratch("lost-resume-data");
    let corpus = d.join("corpus.txt");
    std::fs::write(&corpus, corpus_text('a')).unwrap();
    let data = d.join("data");
    let env = [("TP_DATA_DIR", data.to_str().unwrap())];
    let text_args = [
        "--set",
        "dataset=text",
        "--set",
        "text_path=corpus.txt",
        "--set",
        "text_tokenizer=gpt2",
        "--set",
        "block_size=16",
    ];
    let mut args = T.to_vec();
    args.extend_from_slice(&text_args);
    args.extend_from_slice(&["--set", "max_iters=20", "--out", "run"]);
    assert_ok(&bin("tp-train", &d, &args, &env));
    let log_before = std::fs::read_to_string(d.join("run/log.jsonl")).unwrap();
    std::fs::write(&corpus, corpus_text('z')).unwrap();
    let resume = |extra: &[&str]| {
        let mut a = vec!["--quiet", "--resume", "run", "--set", "max_iters=30"];
        a.extend_from_slice(extra);
        bin("tp-train", &d, &a, &env)
    };
    let o = resume(&[]);
    one_clear_error(&o, "--accept-other-data");
    assert_eq!(
        std::fs::read_to_string(d.join("run/log.jsonl")).unwrap(),
        log_before,
        "a refused resume changed the log"
    );
    assert_ok(&resume(&["--accept-other-data"]));
    let log = std::fs::read_to_string(d.join("run/log.jsonl")).unwrap();
    let note = log
        .lines()
        .find(|l| l.contains("\"note\""))
        .expect("a note in the log");
    assert!(
        note.contains("\"step\":20") && note.contains("other data"),
        "{note}"
    );
    let s = read_summary(&d.join("run")).unwrap().unwrap();
    assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
    assert!(s.notes[0].starts_with("step 20: resumed at step 20 on other data"));
    // The flag is only for resumes.
    let o = train_t(&d, &["--accept-other-data", "--out", "x"]);
    one_clear_error(&o, "--accept-other-data goes with --resume");
    assert!(!d.join("x").exists());
}

#[test]
fn wall_seconds_of_a_resumed_run_count_every_process_that_trained_it() {
    let d = scratch("lost-wall");
    // A first process trains 20 steps, slowed to take at least 1.2 s.
    let o = bin(
        "tp-train",
        &d,
        &[&T[..], &["--set", "max_iters=20", "--out", "run"]].concat(),
        &[("TP_STEP_PAUSE_MS", "60")],
    );
    assert_ok(&o);
    let first = read_summary(&d.join("run")).unwrap().unwrap().wall_seconds;
    let ck = Checkpoint::load_weights(&d.join("run/checkpoints/step-000020")).unwrap();
    let at_20 = ck
        .meta
        .wall_seconds
        .expect("the checkpoint carries the time");
    assert!(at_20 > 1.2, "{at_20}");
    let started = Instant::now();
    assert_ok(&bin(
        "tp-train",
        &d,
        &["--quiet", "--resume", "run", "--set", "max_iters=40"],
        &[],
    ));
    let second = started.elapsed().as_secs_f64();
    let total = read_summary(&d.join("run")).unwrap().unwrap().wall_seconds;
    assert!(
        total >= at_20 && total <= at_20 + second + 0.1,
        "{total} vs {at_20} + {second}"
    );
    assert!(total > first.min(at_20), "{total} {first}");
}

#[test]
fn an_edited_sweep_file_is_refused_naming_the_keys_and_a_lengthened_one_continues() {
    let d = scratch("lost-sweep-edit");
    let write = |body: &str| {
        std::fs::write(
            d.join("sweep.yaml"),
            format!("name: edit\nbase: {{n_embd: 32, eval_iters: 2, eval_interval: 3, checkpoint_interval: 3, sample_tokens: 0, {body}}}\ngrid: {{pattern: [tttt, sppp]}}\n"),
        )
        .unwrap();
        bin("tp-sweep", &d, &["sweep.yaml", "--out", "out"], &[])
    };
    assert_ok(&write("max_iters: 6, lr_decay_iters: 12"));
    let summary = d.join("out/pattern=tttt/summary.json");
    let kept = bytes(&summary);
    // Another learning rate: refused before anything runs, nothing touched.
    let o = write("max_iters: 6, lr_decay_iters: 12, learning_rate: 0.002");
    one_clear_error(&o, "learning_rate 0.001 (run) vs 0.002 (sweep file)");
    assert_eq!(bytes(&summary), kept);
    // Longer, with the schedule's end fixed: each run continues to the new length.
    let o = write("max_iters: 9, lr_decay_iters: 12");
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("continuing from its latest checkpoint"),
        "{text}"
    );
    let s = read_summary(&d.join("out/pattern=tttt")).unwrap().unwrap();
    assert_eq!(s.steps, 9);
    // Longer where the cosine schedule follows max_iters: refused, saying why.
    let d2 = scratch("lost-sweep-edit-2");
    let write2 = |iters: usize| {
        std::fs::write(
            d2.join("sweep.yaml"),
            format!("name: edit\nbase: {{n_embd: 32, eval_iters: 2, eval_interval: 3, max_iters: {iters}, sample_tokens: 0}}\ngrid: {{pattern: [tttt]}}\n"),
        )
        .unwrap();
        bin("tp-sweep", &d2, &["sweep.yaml", "--out", "out"], &[])
    };
    assert_ok(&write2(6));
    one_clear_error(&write2(8), "moves the end of the cosine schedule");
}

#[test]
fn a_grid_of_a_million_points_is_refused_at_once() {
    let d = scratch("lost-grid");
    let values: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let list = values.join(", ");
    std::fs::write(
        d.join("sweep.yaml"),
        format!("name: huge\ngrid: {{seed: [{list}], max_iters: [{list}]}}\n"),
    )
    .unwrap();
    let started = Instant::now();
    let o = bin("tp-sweep", &d, &["sweep.yaml", "--out", "out"], &[]);
    one_clear_error(&o, "has 1000000 runs (1000 seed x 1000 max_iters)");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!d.join("out").exists());
}

#[test]
fn an_import_claiming_a_billion_layers_or_holding_a_nan_is_refused_before_it_allocates() {
    let d = scratch("lost-import");
    assert_ok(&train_t(&d, &["--pattern", "tt", "--out", "run"]));
    assert_ok(&bin(
        "tp-export",
        &d,
        &["run", "--out", "hf", "--as-gpt2"],
        &[],
    ));
    let config = d.join("hf/config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    cfg["n_layer"] = 1_000_000_000u64.into();
    std::fs::write(&config, cfg.to_string()).unwrap();
    let started = Instant::now();
    let o = bin("tp-import", &d, &["hf", "--out", "big"], &[]);
    one_clear_error(
        &o,
        "says n_layer 1000000000 but its safetensors hold 2 layers",
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!d.join("big").exists());
    // A NaN weight: refused at import, not by every tool afterwards.
    cfg["n_layer"] = 2.into();
    std::fs::write(&config, cfg.to_string()).unwrap();
    let st = d.join("hf/model.safetensors");
    let mut tensors = candle_core::safetensors::load(&st, &candle_core::Device::Cpu).unwrap();
    let name = "transformer.h.1.mlp.c_fc.weight";
    let t = &tensors[name];
    let mut v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v[5] = f32::NAN;
    let shape = t.dims().to_vec();
    tensors.insert(
        name.into(),
        candle_core::Tensor::from_vec(v, shape, &candle_core::Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&tensors, &st).unwrap();
    let o = bin("tp-import", &d, &["hf", "--out", "nan"], &[]);
    one_clear_error(
        &o,
        &format!("`{name}` in hf holds a non-finite value (NaN)"),
    );
    assert!(!d.join("nan").exists());
}

#[test]
fn a_closed_stdout_does_not_stop_training() {
    let d = scratch("lost-pipe");
    let mut args = T.to_vec();
    args.pop(); // not --quiet: every evaluation prints a line
    args.extend_from_slice(&["--out", "run"]);
    let mut child = command("tp-train", &d)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -1`: read one line, then close the pipe.
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let s = read_summary(&d.join("run"))
        .unwrap()
        .expect("the run finished");
    assert_eq!(s.steps, 40);
}

#[test]
fn unclear_answers_are_one_clear_line_each() {
    let d = scratch("lost-unclear");
    // --out naming a file.
    std::fs::write(d.join("afile"), "x").unwrap();
    one_clear_error(&train_t(&d, &["--out", "afile"]), "is a file, not a folder");
    assert_eq!(std::fs::read_to_string(d.join("afile")).unwrap(), "x");
    // --resume of nothing.
    one_clear_error(
        &train_t(&d, &["--resume", "nonexistent"]),
        "nonexistent does not exist",
    );
    // tp-export can take the --checkpoint its own checksum error advises.
    assert_ok(&train_t(&d, &["--pattern", "tttt", "--out", "run"]));
    let o = bin(
        "tp-export",
        &d,
        &[
            "run",
            "--checkpoint",
            "run/checkpoints/step-000030",
            "--out",
            "hf30",
        ],
        &[],
    );
    assert_ok(&o);
    let m = d.join("run/checkpoints/step-000040/model.safetensors");
    let mut b = bytes(&m);
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&m, b).unwrap();
    let o = bin("tp-export", &d, &["run", "--out", "hf40"], &[]);
    one_clear_error(&o, "tp-export with --checkpoint");
}

/// `mount --bind` made read-only: a run on a read-only medium, as an archive is.
fn read_only_view(of: &Path, at: &Path) -> bool {
    std::fs::create_dir_all(at).unwrap();
    let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
    ok(Command::new("mount").arg("--bind").arg(of).arg(at))
        && ok(Command::new("mount")
            .args(["-o", "remount,ro,bind"])
            .arg(at))
}

#[test]
fn a_read_only_run_is_evaluated_and_its_report_written_where_told() {
    let d = scratch("lost-readonly");
    assert_ok(&train_t(&d, &["--out", "run"]));
    let ro = d.join("archive");
    if !read_only_view(&d.join("run"), &ro) {
        let _ = Command::new("umount").arg(&ro).status();
        eprintln!("skipped: cannot mount a read-only view here (needs root and mount)");
        return;
    }
    let o = bin("tp-eval", &d, &["archive", "--out", "eval.json"], &[]);
    let _ = Command::new("umount").arg(&ro).status();
    assert_ok(&o);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("eval.json")).unwrap()).unwrap();
    assert!(report["loss"].as_f64().unwrap() > 0.0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("val loss"));
}

#[test]
fn tp_eval_without_out_on_a_read_only_run_prints_the_loss_then_names_out_file() {
    let d = scratch("lost-readonly-2");
    assert_ok(&train_t(&d, &["--out", "run"]));
    let ro = d.join("archive");
    if !read_only_view(&d.join("run"), &ro) {
        let _ = Command::new("umount").arg(&ro).status();
        eprintln!("skipped: cannot mount a read-only view here (needs root and mount)");
        return;
    }
    let o = bin("tp-eval", &d, &["archive"], &[]);
    let _ = Command::new("umount").arg(&ro).status();
    assert!(String::from_utf8_lossy(&o.stdout).contains("val loss"));
    one_clear_error(&o, "read-only: write elsewhere (--out FILE)");
}
