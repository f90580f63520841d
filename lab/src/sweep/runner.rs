//! Running a sweep: each point as its own `tp-train` process (or `mpirun -n N tp-train`),
//! so one failing run cannot take the sweep down. Finished runs (with `summary.json`)
//! of the point's config are skipped; a half-done one resumes from its latest
//! checkpoint; a finished one the sweep file now only lengthens continues to the new
//! length; a run of any other config stops the sweep before anything runs
//! ([`existing`]).

use super::existing::{existing, Existing};
use super::interrupts::Interrupts;
use super::spec::{Point, Sweep};
use crate::run_dir::{self, DirLock, RunSummary};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Finished,
    Skipped,
    /// Training stopped on a non-finite loss or gradient norm at this step
    /// (`diverged.json`): the point's outcome, not retried.
    Diverged(usize),
    Failed(String),
    /// Not finished yet: only `tp-sweep --status` reads a point so (a sweep runs every
    /// point it lists to one of the ends above).
    Pending,
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

/// Runs `cmd` to its end, its stdout and stderr written into `log` as they come (so that
/// `tail -f` follows a run while it trains), passing on any signal the sweep gets
/// meanwhile (`interrupts`).
fn run_child(cmd: &mut Command, log: &Path, interrupts: &Interrupts) -> Result<ExitStatus> {
    let file =
        std::fs::File::create(log).with_context(|| format!("cannot write {}", log.display()))?;
    let mut child = cmd
        .stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file))
        .spawn()?;
    interrupts.child_started(child.id());
    let status = child.wait();
    interrupts.child_ended();
    Ok(status?)
}

/// How the point not finished yet in `dir` is run: its arguments added to `cmd`, and
/// what it is doing (resuming, continuing to a new length, running), or why it cannot be
/// run now (the run left as it is).
fn plan(
    cmd: &mut Command,
    point: &Point,
    found: &Existing,
    dir: &Path,
    configs: &Path,
) -> Result<std::result::Result<&'static str, &'static str>> {
    if DirLock::held_elsewhere(dir) {
        // A trainer of an earlier sweep still writes it: neither resume alongside it nor
        // clear it under it.
        return Ok(Err(
            "still being written by another tp-train (stop it, then run the sweep again)",
        ));
    }
    let checkpointed = run_dir::latest(dir).ok().flatten().is_some();
    match (found, checkpointed) {
        (Existing::Shorter { trained_to }, true) => {
            let to = point.cfg.optim.max_iters;
            cmd.arg("--resume")
                .arg(dir)
                .args(["--set", &format!("max_iters={to}")]);
            tp_harness::say!(
                "{}: trained to {trained_to} steps; the sweep file now asks {to}",
                point.name
            );
            return Ok(Ok("continuing from its latest checkpoint"));
        }
        // Finished, yet without a checkpoint to continue from: kept as it is.
        (Existing::Shorter { .. }, false) => return Ok(Err(
            "a shorter run of this point is there without a checkpoint to continue from (move it away to run the point again)",
        )),
        (Existing::Same, true) => {
            cmd.arg("--resume").arg(dir);
            return Ok(Ok("resuming from its latest checkpoint"));
        }
        _ => {}
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    let cfg_path = configs.join(format!("{}.yaml", point.name));
    std::fs::write(&cfg_path, point.cfg.to_yaml()?)
        .with_context(|| format!("cannot write {}", cfg_path.display()))?;
    cmd.arg("--config").arg(&cfg_path).arg("--out").arg(dir);
    Ok(Ok("running"))
}

/// The records a finished run is made of (what tables, figures and a rerun read; its
/// checkpoints stay where they are).
const RECORDS: [&str; 6] = [
    run_dir::CONFIG_FILE,
    "log.jsonl",
    run_dir::COMM_FILE,
    run_dir::SUMMARY_FILE,
    "eval.json",
    run_dir::SAMPLE_FILE,
];

/// A finished run of exactly `point`'s config in one of the `reuse` sweep directories.
fn reusable(point: &Point, reuse: &[PathBuf]) -> Option<PathBuf> {
    reuse.iter().find_map(|sweep| {
        let entries = std::fs::read_dir(sweep).ok()?;
        let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        dirs.into_iter().find(|d| {
            d.join(run_dir::SUMMARY_FILE).is_file()
                && run_dir::read_config(d).is_ok_and(|c| c == point.cfg)
        })
    })
}

/// Copies a finished run's records from `from` into the point's empty `dir`, the summary
/// last (so that an interrupted copy is not taken for a finished run).
fn copy_records(from: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for f in RECORDS.iter().filter(|f| **f != run_dir::SUMMARY_FILE) {
        if from.join(f).is_file() {
            std::fs::copy(from.join(f), dir.join(f))
                .with_context(|| format!("cannot copy {}", from.join(f).display()))?;
        }
    }
    let summary = std::fs::read(from.join(run_dir::SUMMARY_FILE))?;
    tp_harness::util::write_atomic(&dir.join(run_dir::SUMMARY_FILE), &summary)
}

/// How a point ended before this sweep looked at it, read without touching anything: the
/// one decision both the sweep (which then prints it, copying reused records) and
/// `tp-sweep --status` (which only reports it) take.
pub(super) enum Ended {
    Finished(Box<RunSummary>),
    Diverged(run_dir::DivergedReport),
    /// A finished run of exactly this config in a `reuse:` sweep (its directory here);
    /// the sweep copies its records in.
    Reusable(PathBuf, Box<RunSummary>),
}

/// How `point` (whose directory `dir` holds what `found` says) ended before, if it did.
pub(super) fn ended(
    point: &Point,
    found: &Existing,
    dir: &Path,
    reuse: &[PathBuf],
) -> Option<Ended> {
    if *found == Existing::Same {
        if let Some(s) = read_summary(dir) {
            return Some(Ended::Finished(Box::new(s)));
        }
        if let Some(d) = run_dir::read_diverged(dir).ok().flatten() {
            return Some(Ended::Diverged(d));
        }
    }
    if *found != Existing::Nothing || dir.exists() {
        return None;
    }
    let from = reusable(point, reuse)?;
    let summary = read_summary(&from)?;
    Some(Ended::Reusable(from, Box::new(summary)))
}

/// The point's result where it needs no run: finished earlier, diverged earlier, or
/// finished in a `reuse` sweep (its records copied in); each says so in one line.
fn ended_before(
    point: &Point,
    found: &Existing,
    dir: &Path,
    tag: &str,
    reuse: &[PathBuf],
) -> Result<Option<PointResult>> {
    let result = |status, summary| PointResult {
        point: point.clone(),
        dir: dir.to_path_buf(),
        status,
        summary,
    };
    let summary = match ended(point, found, dir, reuse) {
        None => return Ok(None),
        Some(Ended::Diverged(d)) => {
            tp_harness::say!(
                "{tag}: diverged earlier ({} became {} at step {}), skipped",
                d.what,
                d.value,
                d.step
            );
            return Ok(Some(result(Status::Diverged(d.step), None)));
        }
        Some(Ended::Finished(s)) => Some(*s),
        Some(Ended::Reusable(from, _)) => {
            copy_records(&from, dir)?;
            tp_harness::say!("{tag}: finished in {}, its records copied", from.display());
            read_summary(dir)
        }
    };
    Ok(summary.map(|s| {
        tp_harness::say!("{tag}: finished earlier, skipped");
        result(Status::Skipped, Some(s))
    }))
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
    // Every point against what its directory holds, before anything runs: a run of
    // another config there stops the sweep with one line, nothing touched.
    let found = sweep
        .points
        .iter()
        .map(|p| existing(p, &out.join(&p.name)))
        .collect::<Result<Vec<_>>>()?;
    let mut results = Vec::with_capacity(n);
    for (i, (point, found)) in sweep.points.iter().zip(found).enumerate() {
        interrupts.check()?;
        let dir = out.join(&point.name);
        let tag = format!("[{}/{n}] {}", i + 1, point.name);
        if let Some(done) = ended_before(point, &found, &dir, &tag, &sweep.reuse)? {
            results.push(done);
            continue;
        }
        let mut cmd = sweep.launcher.command(&tp_train);
        let how = match plan(&mut cmd, point, &found, &dir, &configs)? {
            Ok(how) => how,
            Err(why) => {
                tp_harness::say!("{tag}: FAILED: {why}");
                results.push(PointResult {
                    point: point.clone(),
                    dir,
                    status: Status::Failed(why.into()),
                    summary: None,
                });
                continue;
            }
        };
        tp_harness::say!("{tag}: {how} ...");
        let started = Instant::now();
        let log_path = logs.join(format!("{}.log", point.name));
        let status = run_child(cmd.arg("--quiet"), &log_path, interrupts)
            .with_context(|| format!("cannot start {}", tp_train.display()))?;
        interrupts.check()?;
        let secs = started.elapsed().as_secs_f64();
        let summary = read_summary(&dir);
        let diverged = run_dir::read_diverged(&dir).ok().flatten();
        let status = match (&summary, status.success()) {
            (None, false) if diverged.is_some() => {
                let d = diverged.expect("matched");
                tp_harness::say!(
                    "{tag}: diverged: {} became {} at step {} (a learning rate too high?)",
                    d.what,
                    d.value,
                    d.step
                );
                Status::Diverged(d.step)
            }
            (Some(s), true) => {
                tp_harness::say!(
                    "{tag}: done in {:.0}s, val loss {}",
                    secs,
                    s.final_val_loss.map_or("-".into(), |v| format!("{v:.4}"))
                );
                Status::Finished
            }
            _ => {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let last = log
                    .lines()
                    .rev()
                    .find(|l| l.contains("error"))
                    .or_else(|| log.lines().last())
                    .unwrap_or("no output");
                tp_harness::say!(
                    "{tag}: FAILED ({status}): {last} (log: {})",
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
