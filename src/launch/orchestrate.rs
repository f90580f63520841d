//! The one orchestrator every launcher hands its rank contexts to: it builds the rank's
//! [`Trainer`] and runs the schedule of a job: evaluate when due, checkpoint when due,
//! step, log; then the closing sample. The same code runs on every rank whatever the
//! backend; only rank 0 has a reporter and a run directory.

use super::job::Job;
use crate::comm::Phase;
use crate::config::FinalEval;
use crate::data::Split;
use crate::run_dir::LogLine;
use crate::train::context::RankContext;
use crate::train::full_eval::split_loss;
use crate::train::record::{ParamCounts, RankOutcome, Reporter};
use crate::train::trainer::Trainer;
use anyhow::Result;
use std::collections::HashMap;
use std::path::Path;

/// Runs `job` on the rank `ctx` describes. `run_dir` is given to the rank that writes
/// checkpoints (rank 0).
pub fn run_rank(
    job: &Job,
    ctx: &RankContext,
    mut reporter: Option<&mut dyn Reporter>,
    run_dir: Option<&Path>,
) -> Result<RankOutcome> {
    let cfg = &job.cfg;
    let mut trainer = Trainer::new(cfg, &job.data, ctx, &job.faults, job.checkpoint.as_ref())?;
    if let (None, Some(init)) = (&job.checkpoint, &job.init) {
        let unused = trainer.load_initial_weights(&init.checkpoint.weights)?;
        if ctx.mesh.rank == 0 {
            println!(
                "initial weights from {} (step {}){}",
                init.checkpoint.dir.display(),
                init.checkpoint.meta.step,
                if unused.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; pattern {} has no use for {}",
                        cfg.model.pattern,
                        unused.join(", ")
                    )
                }
            );
        }
    }
    let counts = ParamCounts {
        logical: trainer.model().params().logical_numel(),
        local: trainer.model().params().local_numel(),
    };
    if let Some(r) = reporter.as_deref_mut() {
        r.started(cfg, counts);
    }
    let (max_iters, start) = (cfg.optim.max_iters, trainer.steps_done());
    let prior = trainer.tallied();
    let (eval_interval, log_interval) = (cfg.eval.eval_interval, cfg.eval.log_interval);
    let tokens_per_step = cfg.tokens_per_step() as f64;
    // Only ranks of data-parallel index 0 hold what a checkpoint needs; all of them take
    // part in assembling it, rank 0 writes.
    let writes_checkpoints = ctx.mesh.dp_rank() == 0;
    let mut log = Vec::new();
    let mut steps = Vec::with_capacity(max_iters.saturating_sub(start));
    let mut emit = |line: LogLine, reporter: &mut Option<&mut dyn Reporter>| -> Result<()> {
        if let Some(r) = reporter.as_deref_mut() {
            r.logged(&line)?;
        }
        log.push(line);
        Ok(())
    };

    for step in start..=max_iters {
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
        }
        let interval = cfg.checkpoints.checkpoint_interval;
        let checkpoint_now =
            step > start && (step == max_iters || (interval > 0 && step % interval == 0));
        if checkpoint_now && writes_checkpoints {
            trainer.save_checkpoint(run_dir)?;
        }
        if step == max_iters {
            if eval_now {
                emit(line, &mut reporter)?;
            }
            break;
        }

        let rec = trainer.step()?;
        let tokens_per_s = tokens_per_step / (rec.ms / 1e3);
        if let Some(r) = reporter.as_deref_mut() {
            r.step_done(&rec, tokens_per_s);
        }
        if step % log_interval == 0 || eval_now {
            line.train_loss = Some(trainer.mean_over_dp(rec.local_loss)?);
            line.lr = Some(rec.lr);
            line.ms = Some(rec.ms);
            line.tokens_per_s = Some(tokens_per_s);
        }
        if line.train_loss.is_some() || line.val_loss.is_some() {
            emit(line, &mut reporter)?;
        }
        steps.push(rec);
        job.faults.pause(ctx.mesh.rank);
    }
    job.faults.pause(ctx.mesh.rank);

    // The final model over the whole validation split (every TP rank takes part; each
    // DP replica computes the same value).
    let final_eval = if cfg.eval.final_eval == FinalEval::Full {
        ctx.tally.set_phase(Phase::Eval);
        let l = split_loss(
            trainer.model(),
            job.data.split(Split::Val),
            cfg.model.arch.block_size,
            cfg.optim.batch_size,
        )?;
        ctx.tally.set_phase(Phase::Train);
        Some(l)
    } else {
        None
    };
    job.faults.pause(ctx.mesh.rank);
    let sample = if job.opts.skip_sample || cfg.eval.sample_tokens == 0 {
        String::new()
    } else {
        let ids = trainer.sample(cfg.eval.sample_tokens)?;
        job.data.tokenizer().decode(&ids)
    };
    job.faults.pause(ctx.mesh.rank);
    if let Some(r) = reporter {
        r.finished();
    }
    let reg = trainer.model().params();
    if let Some(dir) = &job.faults.dump_params {
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
    let params = if job.opts.keep_params {
        reg.iter()
            .map(|p| Ok((p.name.clone(), p.var.flatten_all()?.to_vec1::<f32>()?)))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    Ok(RankOutcome {
        rank: ctx.mesh.rank,
        log,
        steps,
        tally: ctx.tally.snapshot(),
        prior,
        sample,
        params,
        logical_params: counts.logical,
        local_params: counts.local,
        best_val_loss: trainer.best_val_loss(),
        final_eval,
        hosts: Vec::new(),
    })
}
