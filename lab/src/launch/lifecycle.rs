//! One job's lifecycle, written once for both launchers: the job agreed on, the run
//! directory opened by the process that writes it, the ranks trained, every rank's host,
//! compute and timeline brought to the writer, the job closed. What differs between
//! ranks as threads of this process and ranks as MPI processes is the [`Ranks`] trait
//! (`threads.rs`, `mpi.rs`).

use super::backend::Backend;
use super::closing::finish;
use super::console::ConsoleReporter;
use super::job::{announce, Job, RankOptions, Target};
use super::outcome::RankOutcome;
use super::report::{comm_report, ranks_compute};
use crate::config::RunConfig;
use crate::run_dir::{CommReport, RunDir};
use anyhow::Result;
use std::path::Path;
use std::path::PathBuf;
use tp_harness::util::trace::Span;

/// What a job produced in this process.
pub struct RunResult {
    pub dir: PathBuf,
    pub report: CommReport,
    /// Outcomes of the ranks this process ran (all of them with threads, one with MPI).
    pub outcomes: Vec<RankOutcome>,
}

/// How a job's ranks are launched and how their results meet.
pub trait Ranks {
    fn backend(&self) -> Backend;
    /// The job every rank agrees on (under MPI, resolved after MPI has started, so that a
    /// config error is agreed on and printed once).
    fn job(&self, resolve: &dyn Fn() -> Result<RunConfig>, target: &Target) -> Result<Job>;
    /// The run directory, opened by the process that writes it (`None` elsewhere); every
    /// rank learns whether it could be.
    fn outputs(&self, job: &Job, target: &Target) -> Result<Option<RunDir>>;
    /// Sizes the compute threads of this process's ranks; how many each has.
    fn threads(&self, cfg: &RunConfig) -> usize;
    /// Trains this process's ranks; their outcomes in rank order (the writer's first).
    fn train(
        &self,
        job: &Job,
        reporter: Option<&mut ConsoleReporter>,
        run_dir: Option<&Path>,
    ) -> Result<Vec<RankOutcome>>;
    /// Every rank's host, in rank order.
    fn hosts(&self, outcomes: &[RankOutcome]) -> Vec<String>;
    /// Every rank's compute per step (CPU and wall ms), in rank order.
    fn compute(&self, outcomes: &[RankOutcome]) -> Vec<Option<(f64, f64)>>;
    /// Every rank's timeline, in rank order, on the writer (every rank takes part).
    fn timelines(&self, outcomes: &[RankOutcome]) -> Result<Vec<Vec<Span>>>;
}

/// The job `resolve` makes, trained into `target` by `ranks`, its ranks keeping or
/// skipping what `opts` says.
pub fn run_job(
    ranks: &impl Ranks,
    resolve: &dyn Fn() -> Result<RunConfig>,
    target: &Target,
    progress: bool,
    opts: RankOptions,
) -> Result<RunResult> {
    let mut job = ranks.job(resolve, target)?;
    job.opts = opts;
    let dir = ranks.outputs(&job, target)?;
    let cfg = &job.cfg;
    let threads = ranks.threads(cfg);
    if let Some(d) = &dir {
        announce(&job, ranks.backend(), threads, &d.path);
    }
    let mut reporter = match &dir {
        Some(d) => Some(ConsoleReporter::new(d, cfg, progress, job.resumed_at())?),
        None => None,
    };
    let run_dir = dir.as_ref().map(|d| d.path.as_path());
    let mut outcomes = ranks.train(&job, reporter.as_mut(), run_dir)?;
    let hosts = ranks.hosts(&outcomes);
    let per_rank = ranks.compute(&outcomes);
    let steps = outcomes[0].steps.len();
    outcomes[0].ranks_compute = ranks_compute(&per_rank, steps);
    outcomes[0].hosts = hosts;
    if cfg.eval.trace {
        let timelines = ranks.timelines(&outcomes)?;
        if let Some(d) = &dir {
            let hosts = &outcomes[0].hosts;
            let all: Vec<_> = (timelines.into_iter().enumerate())
                .map(|(r, spans)| (r, hosts[r].clone(), spans))
                .collect();
            super::outputs::write_trace(&job, &d.path, &all)?;
        }
    }
    let report = match &dir {
        Some(d) => finish(&job, d, &outcomes[0])?,
        None => comm_report(cfg, cfg.layout(), &outcomes[0]),
    };
    Ok(RunResult {
        dir: dir.map(|d| d.path.clone()).unwrap_or_default(),
        report,
        outcomes,
    })
}
