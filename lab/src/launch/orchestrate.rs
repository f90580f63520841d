//! The one orchestrator every launcher hands its rank contexts to: it builds the rank's
//! [`RunTrainer`] and runs the schedule of a job: evaluate when due, checkpoint when due,
//! step, log; then the closing sample. The same code runs on every rank whatever the
//! backend; only rank 0 has a reporter and a run directory.

use super::job::Job;
use super::outcome::{RankOutcome, Reporter};
use super::run_trainer::{Diverged, RunTrainer};
use crate::config::FinalEval;
use crate::data::Split;
use crate::run_dir::LogLine;
use anyhow::Result;
use std::collections::HashMap;
use std::path::Path;
use tp_harness::comm::Phase;
use tp_harness::train::context::RankContext;
use tp_harness::train::full_eval::{split_loss, SplitLoss};
use tp_harness::train::record::{ParamCounts, StepRecord};
use tp_harness::util::trace::Span;

/// Runs `job` on the rank `ctx` describes. `run_dir` is given to the rank that writes
/// checkpoints (rank 0).
pub fn run_rank(
    job: &Job,
    ctx: &RankContext,
    mut reporter: Option<&mut dyn Reporter>,
    run_dir: Option<&Path>,
) -> Result<RankOutcome> {
    let cfg = &job.cfg;
    let mut trainer = RunTrainer::new(
        cfg,
        &job.data,
        ctx,
        job.hooks.as_ref(),
        job.checkpoint.as_ref(),
        job.started,
    )?;
    take_initial_weights(job, ctx, &mut trainer)?;
    let counts = ParamCounts {
        logical: trainer.trainer().model().params().logical_numel(),
        local: trainer.trainer().model().params().local_numel(),
        grad_bucket_bytes: trainer.trainer().overlapped_bucket_bytes(),
    };
    if let Some(r) = reporter.as_deref_mut() {
        r.started(cfg, counts);
    }
    let prior = trainer.tallied();
    let (log, steps, mut trace) = match train_steps(job, ctx, &mut trainer, &mut reporter, run_dir)
    {
        Ok(done) => done,
        Err(e) => {
            // A diverged run's outcome is kept beside its log (a sweep reads it).
            if let (Some(dir), Some(d)) = (run_dir, e.downcast_ref::<Diverged>()) {
                crate::run_dir::write_diverged(dir, &d.report)?;
            }
            return Err(e);
        }
    };
    job.hooks.between_phases(ctx.mesh.rank);
    let final_eval = final_eval(job, ctx, &trainer)?;
    job.hooks.between_phases(ctx.mesh.rank);
    let sample = if job.opts.skip_sample || cfg.eval.sample_tokens == 0 {
        String::new()
    } else {
        let ids = trainer.sample(cfg.eval.sample_tokens)?;
        job.data.tokenizer().decode(&ids)
    };
    job.hooks.between_phases(ctx.mesh.rank);
    if let Some(r) = reporter {
        r.finished();
    }
    Ok(RankOutcome {
        rank: ctx.mesh.rank,
        log,
        steps,
        tally: ctx.tally.snapshot(),
        prior,
        sample,
        params: kept_params(job, ctx, &trainer)?,
        param_counts: counts,
        best_val_loss: trainer.trainer().best_val_loss(),
        final_eval,
        hosts: Vec::new(),
        ranks_compute: None,
        nccl: None,
        trace: {
            // A range past the last step ends with the run.
            trace.extend(ctx.tally.trace().stop());
            trace
        },
    })
}

/// A new run started from another run's weights (`init_from`) takes them now; rank 0
/// says where from and what the new pattern does not use.
fn take_initial_weights(job: &Job, ctx: &RankContext, trainer: &mut RunTrainer) -> Result<()> {
    let (None, Some(init)) = (&job.checkpoint, &job.init) else {
        return Ok(());
    };
    let unused = trainer.load_initial_weights(&init.checkpoint.weights)?;
    if ctx.mesh.rank == 0 {
        let from = &init.checkpoint.meta.config;
        // A model taken into another layout is another function of the same weights:
        // its first loss is not the source's, which a user comparing the two must know.
        let changed = job
            .cfg
            .layout()
            .other_function_than(job.cfg.parallel.tp, from.layout(), from.parallel.tp)
            .map(|why| {
                format!(
                    "; note: pattern {} at tp {} computes another function of these weights than {} at tp {} did ({why}): the first loss is not the source's, and training must recover it",
                    job.cfg.model.pattern,
                    job.cfg.parallel.tp,
                    from.model.pattern,
                    from.parallel.tp
                )
            })
            .unwrap_or_default();
        tp_harness::say!(
            "initial weights from {} (step {}){}{changed}",
            init.checkpoint.dir.display(),
            init.checkpoint.meta.step,
            if unused.is_empty() {
                String::new()
            } else {
                format!(
                    "; pattern {} has no use for {}",
                    job.cfg.model.pattern,
                    unused.join(", ")
                )
            }
        );
    }
    Ok(())
}

/// The schedule of a job from the trainer's step to `max_iters`: at each step, evaluate
/// when due, take up a resumed run's history, checkpoint when due, then train and log.
/// Returns the log lines, the step records and the traced timeline of this invocation.
fn train_steps(
    job: &Job,
    ctx: &RankContext,
    trainer: &mut RunTrainer,
    reporter: &mut Option<&mut dyn Reporter>,
    run_dir: Option<&Path>,
) -> Result<(Vec<LogLine>, Vec<StepRecord>, Vec<Span>)> {
    let cfg = &job.cfg;
    let (max_iters, start) = (cfg.optim.max_iters, trainer.trainer().steps_done());
    let (eval_interval, log_interval) = (cfg.eval.eval_interval, cfg.eval.log_interval);
    let interval = cfg.checkpoints.checkpoint_interval;
    let tokens_per_step = cfg.tokens_per_step() as f64;
    // Only ranks of data-parallel index 0 hold what a checkpoint needs; all of them take
    // part in assembling it, rank 0 writes.
    let writes_checkpoints = ctx.mesh.dp_rank() == 0;
    let mut log = Vec::new();
    let mut traced_spans = Vec::new();
    let mut steps = Vec::with_capacity(max_iters.saturating_sub(start));
    let mut emit = |line: LogLine, reporter: &mut Option<&mut dyn Reporter>| -> Result<()> {
        if let Some(r) = reporter.as_deref_mut() {
            r.logged(&line, &ctx.tally.snapshot())?;
        }
        log.push(line);
        Ok(())
    };
    let traced = cfg
        .eval
        .trace
        .then_some(cfg.eval.trace_start..cfg.eval.trace_start + cfg.eval.trace_steps);
    for step in start..=max_iters {
        // Every rank traces the same steps (each one's own timeline).
        let trace = ctx.tally.trace();
        // (A run resumed inside the range traces the rest of it.)
        if traced
            .as_ref()
            .is_some_and(|r| r.start == step || (step == start && r.contains(&step)))
        {
            trace.start();
        }
        if traced.as_ref().is_some_and(|r| r.end == step) && trace.is_on() {
            traced_spans.extend(trace.stop());
        }
        let eval_now = eval_interval > 0 && (step % eval_interval == 0 || step == max_iters);
        let mut line = LogLine {
            step,
            ..Default::default()
        };
        if eval_now {
            let e = trainer.evaluate()?;
            line.eval_train_loss = Some(e.train_loss);
            line.val_loss = Some(e.val_loss);
        }
        if step == start {
            trainer.take_up_history();
            if let (true, Some(r)) = (start > 0, reporter.as_deref_mut()) {
                r.resumed(step, &ctx.tally.snapshot());
            }
        }
        let checkpoint_now =
            step > start && (step == max_iters || (interval > 0 && step % interval == 0));
        if checkpoint_now && writes_checkpoints && !job.opts.skip_checkpoints {
            trainer.save_checkpoint(run_dir)?;
        }
        if step == max_iters {
            if eval_now {
                emit(line, reporter)?;
            }
            break;
        }
        let rec = trainer.step()?;
        let tokens_per_s = tokens_per_step / (rec.ms / 1e3);
        if let Some(r) = reporter.as_deref_mut() {
            r.step_done(&rec, tokens_per_s);
        }
        if step % log_interval == 0 || eval_now {
            line.train_loss = Some(trainer.trainer().mean_over_dp(rec.local_loss)?);
            line.lr = Some(rec.lr);
            line.ms = Some(rec.ms);
            line.tokens_per_s = Some(tokens_per_s);
        }
        if line.train_loss.is_some() || line.val_loss.is_some() {
            emit(line, reporter)?;
        }
        steps.push(rec);
        job.hooks.between_phases(ctx.mesh.rank);
    }
    Ok((log, steps, traced_spans))
}

/// The final model over the whole validation split, with `final_eval: full` (every TP
/// rank takes part; each DP replica computes the same value).
fn final_eval(job: &Job, ctx: &RankContext, trainer: &RunTrainer) -> Result<Option<SplitLoss>> {
    if job.cfg.eval.final_eval != FinalEval::Full {
        return Ok(None);
    }
    let _phase = ctx.tally.enter(Phase::Eval);
    let l = split_loss(
        trainer.trainer().model(),
        job.data.split(Split::Val),
        job.cfg.model.arch.block_size,
        job.cfg.optim.batch_size,
    )?;
    Ok(Some(l))
}

/// This rank's parameters where the job asks for them: written to `TP_DUMP_PARAMS`, and
/// returned when `keep_params` (tests compare ranks).
fn kept_params(
    job: &Job,
    ctx: &RankContext,
    trainer: &RunTrainer,
) -> Result<Vec<(String, Vec<f32>)>> {
    let reg = trainer.trainer().model().params();
    if let Some(dir) = job.hooks.dump_params() {
        std::fs::create_dir_all(dir)?;
        let tensors: HashMap<String, candle_core::Tensor> = reg
            .iter()
            .map(|p| (p.name.clone(), p.var.as_tensor().clone()))
            .collect();
        candle_core::safetensors::save(
            &tensors,
            dir.join(format!("rank{}.safetensors", ctx.mesh.rank)),
        )?;
    }
    if !job.opts.keep_params {
        return Ok(Vec::new());
    }
    reg.iter()
        .map(|p| Ok((p.name.clone(), p.var.flatten_all()?.to_vec1::<f32>()?)))
        .collect()
}
