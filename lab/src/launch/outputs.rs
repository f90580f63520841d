//! Rank 0's outputs of a job: the run directory created or taken over (and its
//! TensorBoard folder checked and made first, so that a folder that cannot be written
//! stops the run with nothing made), and `trace.json` at the end.

use super::job::{Job, Target};
use crate::config::RunConfig;
use crate::run_dir::{default_run_path, LogLine, RunDir};
use anyhow::Result;
use std::path::Path;
use tp_harness::error::user;

/// Rank 0: creates the run directory, or takes over a resumed one (its log cut back to
/// the checkpoint's step), and writes the config.
pub fn open_outputs(job: &Job, target: &Target) -> Result<RunDir> {
    let path = match target {
        Target::New(out) => out
            .clone()
            .unwrap_or_else(|| default_run_path(job.cfg.model.pattern.as_str())),
        Target::Resume(path, _) => path.clone(),
    };
    check_tensorboard_dir(&job.cfg, &path)?;
    let dir = match target {
        Target::New(_) => RunDir::create(&path)?,
        Target::Resume(path, _) => {
            let step = job.checkpoint.as_ref().map_or(0, |c| c.meta.step);
            let (dir, repair) = RunDir::resume(path, step)?;
            if let Some(note) = repair.torn_note(path) {
                tp_harness::say!("{note}");
            }
            if let Some(note) = &job.data_changed {
                dir.log_writer()?
                    .write(&LogLine::note(step, note.clone()))?;
                tp_harness::say!("note: {note}");
            }
            dir
        }
    };
    dir.write_config(&job.cfg)?;
    Ok(dir)
}

/// The run's TensorBoard folder (`tensorboard_dir`), checked and made before the run
/// directory is: never inside a checkpoint (the run's own included: pruning would delete
/// its event files), never a file, writable — each refused in one line naming
/// `tensorboard_dir`, with nothing made.
fn check_tensorboard_dir(cfg: &RunConfig, run: &Path) -> Result<()> {
    if !cfg.eval.tensorboard || cfg.eval.tensorboard_dir.is_none() {
        return Ok(());
    }
    let tb = super::metrics::tensorboard_dir(cfg, run);
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if abs(&tb).starts_with(abs(run).join(crate::run_dir::CHECKPOINTS)) {
        tp_harness::user_bail!(
            "tensorboard_dir {} lies inside this run's checkpoints, which pruning deletes: name a folder outside the run's checkpoints (e.g. runs/tb)",
            cfg.eval.tensorboard_dir.as_deref().unwrap_or_default()
        );
    }
    crate::run_dir::check_out(&tb, "tensorboard_dir")?;
    super::metrics::claim_tensorboard_dir(&tb, run).map_err(|e| {
        user(format!(
            "tensorboard_dir {}: cannot write {} ({}): name a folder you can write (or leave tensorboard_dir out: RUN/tb)",
            cfg.eval.tensorboard_dir.as_deref().unwrap_or_default(),
            tb.display(),
            e.root_cause()
        ))
    })
}

/// Rank 0 writes `trace.json` of every rank's traced steps (`trace: true`): the steps
/// this invocation traced, which a resume inside the range starts later than
/// `trace_start` (the killed invocation's spans went with it) and a resume after it
/// leaves with none (then no file, and a line saying why).
pub fn write_trace(
    job: &Job,
    dir: &Path,
    ranks: &[(usize, String, Vec<tp_harness::util::trace::Span>)],
) -> Result<()> {
    let cfg = &job.cfg;
    let end = cfg.eval.trace_start + cfg.eval.trace_steps;
    let resumed_at = job.checkpoint.as_ref().map_or(0, |c| c.meta.step);
    let from = cfg.eval.trace_start.max(resumed_at);
    if from >= end.min(cfg.optim.max_iters) {
        tp_harness::say!(
            "trace: steps {}..{} ran before step {resumed_at}, where this run resumed; their spans went with the stopped invocation, so no trace.json was written (trace later steps with --set trace_start=...)",
            cfg.eval.trace_start,
            end - 1
        );
        return Ok(());
    }
    let path = crate::run_dir::trace_file::TraceFile::of(cfg, ranks, from)?.write(dir)?;
    let resumed = match from > cfg.eval.trace_start {
        true => format!(", from {from}: resumed inside the traced steps"),
        false => String::new(),
    };
    tp_harness::say!(
        "trace: {} (steps {from}..{}{resumed}; Perfetto or chrome://tracing; tp-plot --timeline {})",
        path.display(),
        end.min(cfg.optim.max_iters) - 1,
        dir.display()
    );
    Ok(())
}
