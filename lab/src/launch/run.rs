//! One training run end to end: checks, data, run directory, ranks, reports. The same
//! steps for both backends (`lifecycle.rs`); with MPI each process is one rank and rank
//! 0 writes (`mpi.rs`), with threads this process runs every rank and writes (here).

pub use super::backend::Backend;
use super::console::ConsoleReporter;
use super::job::{prepare_job, Job, OnOtherData, RankOptions, Target};
use super::lifecycle::{run_job, Ranks, RunResult};
use super::outcome::RankOutcome;
use super::outputs::open_outputs;
use super::report::rank_compute_ms;
use super::threads::{configure_threads, run_threads};
use crate::config::{resolve_resume, Origin, RunConfig};
use crate::run_dir::{read_config, RunDir};
use anyhow::Result;
use std::path::{Path, PathBuf};
use tp_harness::util::trace::Span;

/// Trains a new run.
pub fn run(
    cfg: &RunConfig,
    out: Option<PathBuf>,
    progress: bool,
    backend: Backend,
) -> Result<RunResult> {
    run_resolved(&|| Ok(cfg.clone()), Target::New(out), progress, backend)
}

/// Continues the run in `run_dir` from its latest checkpoint, with `overrides` applied to
/// its config (model keys cannot change; tp and dp can: checkpoints are logical).
pub fn resume(
    run_dir: &Path,
    overrides: &[(String, serde_yaml_ng::Value, Origin)],
    progress: bool,
    backend: Backend,
) -> Result<RunResult> {
    run_resolved(
        &|| resume_config(run_dir, overrides),
        Target::Resume(run_dir.to_path_buf(), OnOtherData::Refuse),
        progress,
        backend,
    )
}

/// The config of a resumed run: its own, with `overrides` applied.
pub fn resume_config(
    run_dir: &Path,
    overrides: &[(String, serde_yaml_ng::Value, Origin)],
) -> Result<RunConfig> {
    resolve_resume(&read_config(run_dir)?, overrides)
}

/// Trains into `target` with the config `resolve` makes. Under MPI every rank resolves
/// it after MPI has started, so that a config error is agreed on and printed once (by
/// rank 0), like every other error of a job's setup.
pub fn run_resolved(
    resolve: &dyn Fn() -> Result<RunConfig>,
    target: Target,
    progress: bool,
    backend: Backend,
) -> Result<RunResult> {
    run_resolved_with(resolve, target, progress, backend, RankOptions::default())
}

/// [`run_resolved`] with what the ranks keep or skip beyond training (a measurement,
/// `tp-train --bench` under mpirun, skips the checkpoints).
pub fn run_resolved_with(
    resolve: &dyn Fn() -> Result<RunConfig>,
    target: Target,
    progress: bool,
    backend: Backend,
    opts: RankOptions,
) -> Result<RunResult> {
    match backend {
        Backend::Threads => run_job(&ThreadRanks, resolve, &target, progress, opts),
        #[cfg(feature = "mpi")]
        Backend::Mpi => super::mpi::run_mpi(resolve, &target, progress, opts),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => tp_harness::user_bail!(
            "this tp-train was built without MPI: rebuild with the `mpi` feature (the default)"
        ),
    }
}

/// Ranks as threads of this process, which writes the run directory.
struct ThreadRanks;

impl Ranks for ThreadRanks {
    fn backend(&self) -> Backend {
        Backend::Threads
    }

    fn job(&self, resolve: &dyn Fn() -> Result<RunConfig>, target: &Target) -> Result<Job> {
        prepare_job(&resolve()?, target)
    }

    fn outputs(&self, job: &Job, target: &Target) -> Result<Option<RunDir>> {
        open_outputs(job, target).map(Some)
    }

    fn threads(&self, cfg: &RunConfig) -> usize {
        configure_threads(cfg.parallel.tp * cfg.parallel.dp)
    }

    fn train(
        &self,
        job: &Job,
        reporter: Option<&mut ConsoleReporter>,
        run_dir: Option<&Path>,
    ) -> Result<Vec<RankOutcome>> {
        run_threads(job, reporter.map(|r| r as _), run_dir)
    }

    /// Every rank is this process, on this host.
    fn hosts(&self, outcomes: &[RankOutcome]) -> Vec<String> {
        vec![tp_harness::util::host::label(); outcomes.len()]
    }

    fn compute(&self, outcomes: &[RankOutcome]) -> Vec<Option<(f64, f64)>> {
        outcomes.iter().map(rank_compute_ms).collect()
    }

    fn timelines(&self, outcomes: &[RankOutcome]) -> Result<Vec<Vec<Span>>> {
        let mut by_rank = vec![Vec::new(); outcomes.len()];
        for o in outcomes {
            by_rank[o.rank] = o.trace.clone();
        }
        Ok(by_rank)
    }
}
