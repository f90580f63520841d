//! Closing a job: what rank 0 writes once its ranks are done (comm.json, sample.txt,
//! eval.json, summary.json) and the summary it prints.

use super::job::Job;
use super::outcome::RankOutcome;
use super::report::{comm_report, run_summary};
use crate::run_dir::{self, CommReport, EvalReport, RunDir};
use anyhow::Result;

/// Rank 0's closing work: comm.json, sample.txt, summary.json and the printed summary.
pub fn finish(job: &Job, dir: &RunDir, outcome: &RankOutcome) -> Result<CommReport> {
    let cfg = &job.cfg;
    if let Some(full) = outcome.final_eval.filter(|f| !f.loss.is_finite()) {
        anyhow::bail!(
            "the final evaluation's loss over the whole val split is {} although training stayed finite (the model overflows): its last checkpoint is kept, nothing else was written",
            full.loss
        );
    }
    let mut report = comm_report(cfg, cfg.layout(), outcome);
    if report.compute.is_none() {
        // A resumed run with nothing left to train keeps what its steps measured.
        report.compute = run_dir::read_comm(&dir.path)
            .ok()
            .flatten()
            .and_then(|r| r.compute);
    }
    dir.write_comm(&report)?;
    dir.write_sample(&outcome.sample)?;
    if let Some(full) = outcome.final_eval {
        let ck = run_dir::latest(&dir.path)?;
        dir.write_eval(&EvalReport {
            loss: full.loss,
            tokens: full.tokens,
            split: crate::data::Split::Val,
            tp: cfg.parallel.tp,
            checkpoint: ck.map(|p| p.display().to_string()).unwrap_or_default(),
            step: cfg.optim.max_iters,
        })?;
    }
    let log = run_dir::read_log(&dir.path)?;
    let mut summary = run_summary(cfg, &report, outcome, &log, job.wall_seconds());
    summary.data_sha256 = Some(job.data.fingerprint());
    summary.rank_machines = job.rank_machines.clone();
    dir.write_summary(&summary)?;
    tp_harness::say!("{}", report.table());
    if !outcome.sample.is_empty() {
        tp_harness::say!("sample:\n{}\n", outcome.sample);
    }
    if let Some(last) = outcome.log.iter().rev().find(|l| l.val_loss.is_some()) {
        tp_harness::say!(
            "final: step {}, train loss {:.4}, val loss {:.4}, best val loss {:.4}",
            last.step,
            last.eval_train_loss.unwrap_or(f32::NAN),
            last.val_loss.unwrap_or(f32::NAN),
            outcome.best_val_loss.unwrap_or(f32::NAN)
        );
    }
    if let Some(full) = outcome.final_eval {
        tp_harness::say!(
            "val loss over the whole split: {:.4} ({} predictions; eval.json)",
            full.loss,
            full.tokens
        );
    }
    tp_harness::say!(
        "outputs in {}: config.yaml, log.jsonl, comm.json, summary.json, sample.txt, {}/",
        dir.path.display(),
        run_dir::CHECKPOINTS
    );
    Ok(report)
}
