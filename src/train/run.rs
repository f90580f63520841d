//! One training run end to end: checks, data, run directory, ranks, reports. The same
//! steps for both backends; with MPI each process is one rank and rank 0 writes.

use super::checkpoint::{self, Checkpoint};
use super::config::{read_run_config, resolve_resume, Origin, RunConfig};
use super::launch::{configure_threads, run_threads};
use super::rank::{RankIo, RankOptions, TrainOutcome};
use super::report::{CommReport, RunSummary};
use super::run_dir::{default_run_path, RunDir};
use crate::data::{data_root, prepare, prepare_text, Dataset, TEXT};
use crate::error::user;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How ranks are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// All ranks as threads of this process.
    Threads,
    /// One process per rank under mpirun.
    Mpi,
}

impl Backend {
    /// MPI when started by an MPI launcher, threads otherwise.
    pub fn auto() -> Self {
        #[cfg(feature = "mpi")]
        if crate::tp::mpi::launched_by_mpirun() {
            return Backend::Mpi;
        }
        Backend::Threads
    }
}

pub struct RunResult {
    pub dir: PathBuf,
    pub report: CommReport,
    /// Outcomes of the ranks this process ran (all of them with threads, one with MPI).
    pub outcomes: Vec<TrainOutcome>,
}

/// Loads (preparing if needed) the configured dataset.
pub fn load_dataset(cfg: &RunConfig) -> Result<Dataset> {
    let dir = if cfg.dataset == TEXT {
        let Some(path) = &cfg.text_path else {
            crate::user_bail!(
                "dataset `text` needs text_path: a UTF-8 file or folder (--set text_path=PATH)"
            );
        };
        prepare_text(Path::new(path), &data_root())?
    } else {
        prepare(&cfg.dataset, &data_root())?
    };
    Dataset::load(&dir)
}

/// Checks that need the data: everything user input can break, before anything is written.
pub fn checked_dataset(cfg: &RunConfig) -> Result<Dataset> {
    cfg.validate()?;
    let data = load_dataset(cfg)?;
    cfg.model_config(data.vocab_size())?
        .check(cfg.tp)
        .map_err(user)?;
    Ok(data)
}

/// What a run writes into.
#[derive(Debug, Clone)]
pub enum Target {
    /// A new run directory (default `runs/<timestamp>-<pattern>`).
    New(Option<PathBuf>),
    /// Continue the run in this directory from its latest checkpoint.
    Resume(PathBuf),
}

/// Everything a rank needs before training, checked without writing anything.
pub(super) struct Prepared {
    pub cfg: RunConfig,
    pub data: Dataset,
    pub checkpoint: Option<Checkpoint>,
}

pub(super) fn prepare_run(cfg: &RunConfig, target: &Target) -> Result<Prepared> {
    let data = checked_dataset(cfg)?;
    let checkpoint = match target {
        Target::New(_) => None,
        Target::Resume(dir) => {
            let Some(ck_dir) = checkpoint::latest(dir)? else {
                crate::user_bail!(
                    "{} has no checkpoint to resume from (checkpoints are written every checkpoint_interval steps and at the end)",
                    dir.display()
                );
            };
            let ck = Checkpoint::load(&ck_dir)?;
            ck.check_matches(cfg)?;
            if cfg.max_iters < ck.meta.step {
                crate::user_bail!(
                    "the latest checkpoint is at step {} but max_iters is {}: raise it (--set max_iters=N)",
                    ck.meta.step,
                    cfg.max_iters
                );
            }
            Some(ck)
        }
    };
    Ok(Prepared {
        cfg: cfg.clone(),
        data,
        checkpoint,
    })
}

/// Rank 0: creates the run directory, or reopens a resumed one (its log cut back to the
/// checkpoint's step, so the resumed lines continue it exactly), and writes the config.
pub(super) fn open_outputs(p: &Prepared, target: &Target) -> Result<RunDir> {
    let dir = match target {
        Target::New(out) => RunDir::create(
            &out.clone()
                .unwrap_or_else(|| default_run_path(&p.cfg.pattern)),
        )?,
        Target::Resume(path) => {
            let step = p.checkpoint.as_ref().map_or(0, |c| c.meta.step);
            RunDir::reopen(path, step)?
        }
    };
    dir.write("config.yaml", &p.cfg.to_yaml()?)?;
    Ok(dir)
}

pub(super) fn announce(p: &Prepared, backend: &str, threads: usize, dir: &Path) {
    let (cfg, data) = (&p.cfg, &p.data);
    println!(
        "tp-train: {} on {} ({} tokens of vocab {}), {} rank(s) as {backend} x {threads} math thread(s) each",
        cfg.preset,
        cfg.dataset,
        data.train.len(),
        data.vocab_size(),
        cfg.tp * cfg.dp,
    );
    println!("run directory: {}", dir.display());
    if let Some(ck) = &p.checkpoint {
        println!(
            "resuming from {} (step {}) to max_iters {}",
            ck.dir.display(),
            ck.meta.step,
            cfg.max_iters
        );
        if let Ok(layout) = cfg.layout() {
            super::sample::warn_if_other_function(&layout, ck.meta.config.tp, cfg.tp);
        }
    }
}

/// Rank 0's closing work: comm.json, sample.txt and the printed summary.
pub(super) fn finish(
    cfg: &RunConfig,
    dir: &RunDir,
    outcome: &TrainOutcome,
    started: Instant,
) -> Result<CommReport> {
    let report = CommReport::new(cfg, &cfg.layout()?, outcome);
    dir.write("comm.json", &report.to_json()?)?;
    dir.write("sample.txt", &outcome.sample)?;
    // Written last: its presence marks the run finished (sweeps skip it).
    let summary = RunSummary::new(cfg, &report, outcome, started.elapsed().as_secs_f64());
    dir.write("summary.json", &serde_json::to_string_pretty(&summary)?)?;
    println!("{}", report.table());
    if !outcome.sample.is_empty() {
        println!("sample:\n{}\n", outcome.sample);
    }
    if let Some(last) = outcome.log.iter().rev().find(|l| l.val_loss.is_some()) {
        println!(
            "final: step {}, train loss {:.4}, val loss {:.4}, best val loss {:.4}",
            last.step,
            last.eval_train_loss.unwrap_or(f32::NAN),
            last.val_loss.unwrap_or(f32::NAN),
            outcome.best_val_loss.unwrap_or(f32::NAN)
        );
    }
    println!(
        "outputs in {}: config.yaml, log.jsonl, comm.json, summary.json, sample.txt, {}/",
        dir.path.display(),
        checkpoint::CHECKPOINTS
    );
    Ok(report)
}

/// Trains a new run.
pub fn run(
    cfg: &RunConfig,
    out: Option<PathBuf>,
    progress: bool,
    backend: Backend,
) -> Result<RunResult> {
    launch(cfg, Target::New(out), progress, backend)
}

/// Continues the run in `run_dir` from its latest checkpoint, with `overrides` applied to
/// its config (model keys cannot change; tp and dp can: checkpoints are logical).
pub fn resume(
    run_dir: &Path,
    overrides: &[(String, serde_yaml_ng::Value, Origin)],
    progress: bool,
    backend: Backend,
) -> Result<RunResult> {
    let cfg = resolve_resume(&read_run_config(run_dir)?, overrides)?;
    launch(
        &cfg,
        Target::Resume(run_dir.to_path_buf()),
        progress,
        backend,
    )
}

fn launch(cfg: &RunConfig, target: Target, progress: bool, backend: Backend) -> Result<RunResult> {
    match backend {
        Backend::Threads => run_in_threads(cfg, &target, progress),
        #[cfg(feature = "mpi")]
        Backend::Mpi => super::launch_mpi::run_mpi(cfg, &target, progress),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => crate::user_bail!(
            "this tp-train was built without MPI: rebuild with the `mpi` feature (the default)"
        ),
    }
}

fn run_in_threads(cfg: &RunConfig, target: &Target, progress: bool) -> Result<RunResult> {
    let started = Instant::now();
    let p = prepare_run(cfg, target)?;
    let dir = open_outputs(&p, target)?;
    let threads = configure_threads(cfg.tp * cfg.dp);
    announce(&p, "threads", threads, &dir.path);
    let mut reporter = dir.reporter(cfg.max_iters, progress)?;
    let io = RankIo {
        run_dir: Some(&dir.path),
        resume: p.checkpoint.as_ref(),
    };
    let outcomes = run_threads(
        cfg,
        &p.data,
        Some(&mut reporter),
        RankOptions::default(),
        io,
    )?;
    let report = finish(cfg, &dir, &outcomes[0], started)?;
    Ok(RunResult {
        dir: dir.path,
        report,
        outcomes,
    })
}
