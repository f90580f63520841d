//! Running a sweep: each point as its own `tp-train` process (or `mpirun -n N tp-train`),
//! so one failing run cannot take the sweep down. Finished runs (with `summary.json`)
//! are skipped; a half-done run resumes from its latest checkpoint when its config is
//! unchanged, and otherwise starts again from scratch.

use super::interrupts::Interrupts;
use super::spec::{Launcher, Point, Sweep};
use crate::run_dir::{self, read_config, DirLock, RunSummary};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Finished,
    Skipped,
    Failed(String),
}

#[derive(Debug, Clone)]
pub struct PointResult {
    pub point: Point,
    pub dir: PathBuf,
    pub status: Status,
    pub summary: Option<RunSummary>,
}

fn sibling_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .context("cannot locate the tp-harness binaries")?;
    let p = dir.join(name);
    if p.is_file() {
        return Ok(p);
    }
    // Integration tests run from target/<profile>/deps.
    let up = dir.parent().map(|d| d.join(name)).filter(|p| p.is_file());
    up.with_context(|| format!("{name} not found next to {}", exe.display()))
}

fn read_summary(dir: &Path) -> Option<RunSummary> {
    run_dir::read_summary(dir).ok().flatten()
}

fn command(launcher: &Launcher, tp_train: &Path) -> Command {
    match launcher {
        Launcher::Threads => {
            let mut c = Command::new(tp_train);
            c.args(["--backend", "threads"]);
            c
        }
        Launcher::Mpirun(n) => {
            let mut c = Command::new("mpirun");
            c.args(["-n", &n.to_string(), "--oversubscribe", "--bind-to", "none"])
                .arg(tp_train);
            // OpenMPI refuses root without its consent; a sweep as root should just work.
            c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            c
        }
    }
}

/// Runs `cmd` to its end with its output captured, passing on any signal the sweep gets
/// meanwhile (`interrupts`).
fn run_child(cmd: &mut Command, interrupts: &Interrupts) -> std::io::Result<Output> {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    interrupts.child_started(child.id());
    let output = child.wait_with_output();
    interrupts.child_ended();
    output
}

/// Runs every point not yet finished under `out`; prints a line per run. The caller owns
/// `out` (see [`crate::sweep::sweep_and_report`]). A signal in `interrupts` stops the
/// sweep once the run under way has ended ([`Interrupts::check`]).
pub fn run_sweep(sweep: &Sweep, out: &Path, interrupts: &Interrupts) -> Result<Vec<PointResult>> {
    let tp_train = sibling_binary("tp-train")?;
    let configs = out.join(".configs");
    let logs = out.join("logs");
    std::fs::create_dir_all(&configs)
        .with_context(|| format!("cannot create {}", configs.display()))?;
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let n = sweep.points.len();
    let mut results = Vec::with_capacity(n);
    for (i, point) in sweep.points.iter().enumerate() {
        interrupts.check()?;
        let dir = out.join(&point.name);
        let tag = format!("[{}/{n}] {}", i + 1, point.name);
        if let Some(summary) = read_summary(&dir) {
            println!("{tag}: finished earlier, skipped");
            results.push(PointResult {
                point: point.clone(),
                dir,
                status: Status::Skipped,
                summary: Some(summary),
            });
            continue;
        }
        if DirLock::held_elsewhere(&dir) {
            // A trainer of an earlier sweep still writes it: neither resume alongside it
            // nor clear it under it.
            let why = "still being written by another tp-train (stop it, then run the sweep again)";
            println!("{tag}: FAILED: {why}");
            results.push(PointResult {
                point: point.clone(),
                dir,
                status: Status::Failed(why.into()),
                summary: None,
            });
            continue;
        }
        let mut cmd = command(&sweep.launcher, &tp_train);
        let resumable = dir.is_dir()
            && read_config(&dir).ok().as_ref() == Some(&point.cfg)
            && run_dir::latest(&dir).ok().flatten().is_some();
        let how = if resumable {
            cmd.arg("--resume").arg(&dir);
            "resuming from its latest checkpoint"
        } else {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("cannot clear {}", dir.display()))?;
            }
            let cfg_path = configs.join(format!("{}.yaml", point.name));
            std::fs::write(&cfg_path, point.cfg.to_yaml()?)
                .with_context(|| format!("cannot write {}", cfg_path.display()))?;
            cmd.arg("--config").arg(&cfg_path).arg("--out").arg(&dir);
            "running"
        };
        println!("{tag}: {how} ...");
        let started = Instant::now();
        let log_path = logs.join(format!("{}.log", point.name));
        let output = run_child(cmd.arg("--quiet"), interrupts)
            .with_context(|| format!("cannot start {}", tp_train.display()))?;
        let mut log = output.stdout.clone();
        log.extend_from_slice(&output.stderr);
        std::fs::write(&log_path, &log)
            .with_context(|| format!("cannot write {}", log_path.display()))?;
        interrupts.check()?;
        let secs = started.elapsed().as_secs_f64();
        let summary = read_summary(&dir);
        let status = match (&summary, output.status.success()) {
            (Some(s), true) => {
                println!(
                    "{tag}: done in {:.0}s, val loss {}",
                    secs,
                    s.final_val_loss.map_or("-".into(), |v| format!("{v:.4}"))
                );
                Status::Finished
            }
            _ => {
                let err = String::from_utf8_lossy(&output.stderr);
                let last = err
                    .lines()
                    .rev()
                    .find(|l| l.contains("error"))
                    .or_else(|| err.lines().last())
                    .unwrap_or("no output");
                println!(
                    "{tag}: FAILED ({}): {last} (log: {})",
                    output.status,
                    log_path.display()
                );
                Status::Failed(last.to_string())
            }
        };
        results.push(PointResult {
            point: point.clone(),
            dir,
            status,
            summary,
        });
    }
    Ok(results)
}
