//! One training run end to end: checks, data, run directory, ranks, reports. The same
//! steps for both backends; with MPI each process is one rank and rank 0 writes.

use super::config::RunConfig;
use super::launch::{configure_threads, run_threads};
use super::rank::{RankOptions, TrainOutcome};
use super::report::CommReport;
use super::run_dir::{default_run_path, RunDir};
use crate::data::{data_root, prepare, Dataset};
use crate::error::user;
use anyhow::Result;
use std::path::{Path, PathBuf};

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
    let dir = prepare(&cfg.dataset, &data_root())?;
    Dataset::load(&dir)
}

/// Checks that need the data: everything user input can break, before anything is written.
pub fn checked_dataset(cfg: &RunConfig) -> Result<Dataset> {
    cfg.validate()?;
    let data = load_dataset(cfg)?;
    cfg.model_config(data.vocab().len())?
        .check(cfg.tp)
        .map_err(user)?;
    Ok(data)
}

/// Opens the run directory and writes the resolved config.
pub(super) fn open_run_dir(cfg: &RunConfig, out: Option<PathBuf>) -> Result<RunDir> {
    let path = out.unwrap_or_else(|| default_run_path(&cfg.pattern));
    let dir = RunDir::create(&path)?;
    dir.write("config.yaml", &cfg.to_yaml()?)?;
    Ok(dir)
}

pub(super) fn announce(cfg: &RunConfig, data: &Dataset, backend: &str, threads: usize, dir: &Path) {
    println!(
        "tp-train: {} on {} ({} tokens of vocab {}), {} rank(s) as {backend} x {threads} math thread(s) each",
        cfg.preset,
        cfg.dataset,
        data.train.len(),
        data.vocab().len(),
        cfg.tp * cfg.dp,
    );
    println!("run directory: {}", dir.display());
}

/// Rank 0's closing work: comm.json, sample.txt and the printed summary.
pub(super) fn finish(cfg: &RunConfig, dir: &RunDir, outcome: &TrainOutcome) -> Result<CommReport> {
    let report = CommReport::new(cfg, &cfg.layout()?, outcome);
    dir.write("comm.json", &report.to_json()?)?;
    dir.write("sample.txt", &outcome.sample)?;
    println!("{}", report.table());
    if !outcome.sample.is_empty() {
        println!("sample:\n{}\n", outcome.sample);
    }
    if let Some(last) = outcome.log.iter().rev().find(|l| l.val_loss.is_some()) {
        println!(
            "final: step {}, train loss {:.4}, val loss {:.4}",
            last.step,
            last.eval_train_loss.unwrap_or(f32::NAN),
            last.val_loss.unwrap_or(f32::NAN)
        );
    }
    println!(
        "outputs in {}: config.yaml, log.jsonl, comm.json, sample.txt",
        dir.path.display()
    );
    Ok(report)
}

pub fn run(
    cfg: &RunConfig,
    out: Option<PathBuf>,
    progress: bool,
    backend: Backend,
) -> Result<RunResult> {
    match backend {
        Backend::Threads => run_in_threads(cfg, out, progress),
        #[cfg(feature = "mpi")]
        Backend::Mpi => super::launch_mpi::run_mpi(cfg, out, progress),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => crate::user_bail!(
            "this tp-train was built without MPI: rebuild with the `mpi` feature (the default)"
        ),
    }
}

fn run_in_threads(cfg: &RunConfig, out: Option<PathBuf>, progress: bool) -> Result<RunResult> {
    let data = checked_dataset(cfg)?;
    let dir = open_run_dir(cfg, out)?;
    let threads = configure_threads(cfg.tp * cfg.dp);
    announce(cfg, &data, "threads", threads, &dir.path);
    let mut reporter = dir.reporter(cfg.max_iters, progress)?;
    let outcomes = run_threads(cfg, &data, Some(&mut reporter), RankOptions::default())?;
    let report = finish(cfg, &dir, &outcomes[0])?;
    Ok(RunResult {
        dir: dir.path,
        report,
        outcomes,
    })
}
