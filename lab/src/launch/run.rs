//! One training run end to end: checks, data, run directory, ranks, reports. The same
//! steps for both backends; with MPI each process is one rank and rank 0 writes.

pub use super::backend::Backend;
use super::closing::finish;
use super::console::ConsoleReporter;
use super::job::{announce, prepare_job, OnOtherData, Target};
use super::outcome::RankOutcome;
use super::outputs::open_outputs;
use super::report::{rank_compute_ms, ranks_compute};
use super::threads::{configure_threads, run_threads};
use crate::config::{resolve_resume, Origin, RunConfig};
use crate::run_dir::{read_config, CommReport};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub struct RunResult {
    pub dir: PathBuf,
    pub report: CommReport,
    /// Outcomes of the ranks this process ran (all of them with threads, one with MPI).
    pub outcomes: Vec<RankOutcome>,
}

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
    match backend {
        Backend::Threads => run_in_threads(&resolve()?, &target, progress),
        #[cfg(feature = "mpi")]
        Backend::Mpi => {
            let r = super::mpi::run_mpi(resolve, &target, progress)?;
            Ok(RunResult {
                dir: r.dir,
                report: r.report,
                outcomes: vec![r.outcome],
            })
        }
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => tp_harness::user_bail!(
            "this tp-train was built without MPI: rebuild with the `mpi` feature (the default)"
        ),
    }
}

fn run_in_threads(cfg: &RunConfig, target: &Target, progress: bool) -> Result<RunResult> {
    let job = prepare_job(cfg, target)?;
    let dir = open_outputs(&job, target)?;
    let threads = configure_threads(cfg.parallel.tp * cfg.parallel.dp);
    announce(&job, Backend::Threads, threads, &dir.path);
    let mut reporter = ConsoleReporter::new(&dir, cfg, progress, job.resumed_at())?;
    let mut outcomes = run_threads(&job, Some(&mut reporter), Some(&dir.path))?;
    // Threads: every rank is this process, on this host.
    outcomes[0].hosts = vec![tp_harness::util::host::label(); outcomes.len()];
    let per_rank: Vec<_> = outcomes.iter().map(rank_compute_ms).collect();
    outcomes[0].ranks_compute = ranks_compute(&per_rank, outcomes[0].steps.len());
    let report = finish(&job, &dir, &outcomes[0])?;
    if cfg.eval.trace {
        let ranks: Vec<_> = outcomes
            .iter()
            .map(|o| (o.rank, outcomes[0].hosts[o.rank].clone(), o.trace.clone()))
            .collect();
        super::outputs::write_trace(&job, &dir.path, &ranks)?;
    }
    Ok(RunResult {
        dir: dir.path.clone(),
        report,
        outcomes,
    })
}
