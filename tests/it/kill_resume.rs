//! The kill -9 experiment: a run that checkpoints every step is killed at 24 random
//! moments (half anywhere in the run's span, a quarter shortly after a random checkpoint,
//! a quarter after the last one: in the final evaluation, the sample or the closing
//! files), then resumed with `--resume` (or, killed before it had written its config,
//! started again). Every resumed run must end exactly
//! where the uninterrupted run ended: the same final weights and optimiser state bit for
//! bit, and the same `log.jsonl`, `summary.json`, `comm.json`, `eval.json` and
//! `sample.txt`, timings aside.

use crate::common::{assert_ok, command, scratch};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const STEPS: usize = 24;
const PAUSE_MS: u64 = 20;

fn args() -> Vec<String> {
    let steps = format!("max_iters={STEPS}");
    [
        "--preset",
        "micro",
        "--tp",
        "2",
        "--set",
        &steps,
        "--set",
        "checkpoint_interval=1",
        "--set",
        "keep_checkpoints=2",
        "--set",
        "eval_interval=8",
        "--set",
        "eval_iters=2",
        "--set",
        "log_interval=1",
        "--set",
        "sample_tokens=40",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Removes every key named in `keys`, at any depth: the timings, which no two runs share.
fn strip(v: &mut Value, keys: &[&str]) {
    match v {
        Value::Object(m) => {
            for k in keys {
                m.remove(*k);
            }
            for x in m.values_mut() {
                strip(x, keys);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| strip(x, keys)),
        _ => {}
    }
}

/// What a finished run leaves, timings taken out.
#[derive(Debug, PartialEq)]
struct Outcome {
    weights: Vec<u8>,
    m: Vec<u8>,
    v: Vec<u8>,
    log: Vec<Value>,
    summary: Value,
    comm: Value,
    eval: Value,
    sample: String,
}

fn outcome(run: &Path) -> Outcome {
    let ck = run.join(format!("checkpoints/step-{STEPS:06}"));
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let json = |name: &str, timings: &[&str]| -> Value {
        let mut v: Value = serde_json::from_slice(&read(&run.join(name))).unwrap();
        strip(&mut v, timings);
        v
    };
    let log = std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            strip(&mut v, &["ms", "tokens_per_s"]);
            v
        })
        .collect();
    Outcome {
        weights: read(&ck.join("model.safetensors")),
        m: read(&ck.join("optimizer.m.safetensors")),
        v: read(&ck.join("optimizer.v.safetensors")),
        log,
        summary: json(
            "summary.json",
            &[
                "tokens_per_s",
                "step_ms",
                "comm_ms_per_step",
                "compute_ms_per_step",
                "wall_seconds",
                "sharing_slowdown",
                // The invocation's environment switches (the kills' own pause).
                "environment",
            ],
        ),
        // Timings: each invocation measures its own (`compute` its steps' CPU time).
        comm: json("comm.json", &["seconds", "compute"]),
        eval: json("eval.json", &[]),
        sample: String::from_utf8(read(&run.join("sample.txt"))).unwrap(),
    }
}

/// Where a killed run stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Moment {
    BeforeConfig,
    BeforeFirstCheckpoint,
    BetweenCheckpoints,
    AfterLastCheckpoint,
    Finished,
}

fn moment(run: &Path) -> Moment {
    if !run.join("config.yaml").exists() {
        return Moment::BeforeConfig;
    }
    if run.join("summary.json").exists() {
        return Moment::Finished;
    }
    match std::fs::read_to_string(run.join("checkpoints/latest")) {
        Err(_) => Moment::BeforeFirstCheckpoint,
        Ok(n) if n.trim() == format!("step-{STEPS:06}") => Moment::AfterLastCheckpoint,
        Ok(_) => Moment::BetweenCheckpoints,
    }
}

#[test]
fn runs_killed_at_24_random_moments_resume_to_the_uninterrupted_runs_weights_log_summary_and_comm()
{
    let d = scratch("kill-resume");
    let reference_dir = d.join("reference");
    std::fs::create_dir_all(&reference_dir).unwrap();
    let started = Instant::now();
    assert_ok(
        &command("tp-train", &reference_dir)
            .args(args())
            .args(["--out", "run"])
            .env("TP_STEP_PAUSE_MS", PAUSE_MS.to_string())
            .output()
            .unwrap(),
    );
    let span = started.elapsed();
    let reference = outcome(&reference_dir.join("run"));
    assert_eq!(
        reference.log.len(),
        STEPS + 1,
        "one line per step and the final evaluation"
    );

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
    let mut seen = std::collections::BTreeMap::new();
    for trial in 0..24 {
        let dir = d.join(format!("trial-{trial}"));
        std::fs::create_dir_all(&dir).unwrap();
        let run = dir.join("run");
        let mut child = command("tp-train", &dir)
            .args(args())
            .args(["--out", "run"])
            .env("TP_STEP_PAUSE_MS", PAUSE_MS.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let wait_for_checkpoint = |step: usize| {
            let name = format!("step-{step:06}");
            while std::fs::read_to_string(run.join("checkpoints/latest"))
                .ok()
                .as_deref()
                != Some(name.as_str())
                && t0.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        match trial % 4 {
            // After the last checkpoint: in the final evaluation, the sample or the
            // closing files (three pauses long).
            3 => {
                wait_for_checkpoint(STEPS);
                std::thread::sleep(Duration::from_millis(rng.random_range(0..3 * PAUSE_MS)));
            }
            // Shortly after a random checkpoint: in a step or the next checkpoint's write.
            1 => {
                wait_for_checkpoint(rng.random_range(1..STEPS - 1));
                std::thread::sleep(Duration::from_millis(rng.random_range(0..PAUSE_MS)));
            }
            // Anywhere in the run, its start included.
            _ => std::thread::sleep(span.mul_f64(rng.random_range(0.0..1.0))),
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        let at = moment(&run);
        *seen.entry(at).or_insert(0) += 1;
        let mut again = command("tp-train", &dir);
        if at == Moment::BeforeConfig {
            again.args(args()).args(["--out", "run"]);
        } else {
            again.args(["--resume", "run", "--quiet"]);
        }
        let o = again.output().unwrap();
        assert_ok(&o);
        let resumed = outcome(&run);
        assert!(
            resumed == reference,
            "trial {trial} (killed {at:?}, {status}): the resumed run differs from the uninterrupted one\nresumed: {:?}\nreference: {:?}",
            (&resumed.log, &resumed.summary, &resumed.comm, &resumed.eval),
            (&reference.log, &reference.summary, &reference.comm, &reference.eval)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    println!("kill moments: {seen:?}");
    assert!(
        seen.get(&Moment::AfterLastCheckpoint).copied().unwrap_or(0) >= 3,
        "too few kills after the last checkpoint: {seen:?}"
    );
    assert!(
        seen.get(&Moment::BetweenCheckpoints).copied().unwrap_or(0) >= 6,
        "too few kills between checkpoints: {seen:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}
