//! The rank program: what every rank runs, whatever the backend. It never branches on
//! rank inside the model; only the reporter (rank 0's I/O) differs.

use super::checkpoint::{self, Checkpoint};
use super::config::RunConfig;
use super::grads::GradBuffer;
use super::memory;
use super::optimizer::{AdamW, AdamWConfig};
use super::sample::{generate, SampleOptions};
use super::schedule::CosineSchedule;
use crate::blocks::Fwd;
use crate::data::{Batcher, Dataset, Split, EVAL_STREAM};
use crate::model::Gpt;
use crate::ops::profile::{self, OpTimes};
use crate::tp::{
    CommKind, CountedComm, Mesh, ParamKind, Phase, SeededInit, Site, StoredParams, Tally,
    TallySnapshot,
};
use anyhow::{bail, Result};
use candle_core::Tensor;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A rank's view of the job: where it sits in the mesh and its two counted groups.
pub struct RankContext {
    pub mesh: Mesh,
    pub tp: CountedComm,
    pub dp: CountedComm,
    pub tally: Arc<Tally>,
}

/// One line of `log.jsonl`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LogLine {
    pub step: usize,
    /// Loss of this step's batch, averaged over accumulation and data-parallel ranks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_loss: Option<f32>,
    /// Evaluation: mean loss over `eval_iters` batches of each split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_train_loss: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
}

/// Rank 0's outlet for progress and logs; other ranks have none.
pub trait Reporter {
    fn started(&mut self, _cfg: &RunConfig, _logical_params: usize) {}
    fn logged(&mut self, _line: &LogLine) -> Result<()> {
        Ok(())
    }
    fn step_done(&mut self, _step: usize, _loss: f32, _tokens_per_s: f64) {}
    fn finished(&mut self) {}
}

/// Seconds spent in each phase of training steps (this rank).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StepTimes {
    pub forward: f64,
    pub backward: f64,
    /// Gradient sync (TP partial sum, DP average) and the norm.
    pub grad_sync: f64,
    pub optimizer: f64,
    pub steps: usize,
}

pub struct TrainOutcome {
    pub rank: usize,
    pub log: Vec<LogLine>,
    pub tally: TallySnapshot,
    pub forward_passes: usize,
    pub backward_passes: usize,
    pub times: StepTimes,
    /// Wall-clock milliseconds of each training step.
    pub step_ms: Vec<f64>,
    /// Seconds of each training step's phases: forward, backward, grad sync, optimizer.
    pub step_phases: Vec<[f64; 4]>,
    /// Time and FLOPs of each training step's ops on this rank (`ops::profile`).
    pub step_ops: Vec<OpTimes>,
    /// Peak resident bytes of the process during each training step (rank 0 measures;
    /// empty on other ranks and where /proc is unavailable).
    pub step_peak_rss: Vec<u64>,
    pub sample: String,
    /// This rank's parameters after training, by name (only when asked for).
    pub params: Vec<(String, Vec<f32>)>,
    pub logical_params: usize,
    pub best_val_loss: Option<f32>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct RankOptions {
    pub keep_params: bool,
    pub skip_sample: bool,
}

fn scalar(t: &Tensor) -> Result<f32> {
    Ok(t.to_scalar::<f32>()?)
}

fn evaluate(
    model: &Gpt,
    batcher: &Batcher,
    cfg: &RunConfig,
    ctx: &RankContext,
    step: usize,
) -> Result<(f32, f32)> {
    ctx.tally.set_phase(Phase::Eval);
    let mut out = [0f32; 2];
    for (slot, split) in [Split::Train, Split::Val].into_iter().enumerate() {
        let mut sum = 0f64;
        for i in 0..cfg.eval_iters {
            // Keyed by the step, so a resumed run evaluates on the same batches.
            let key = EVAL_STREAM + (step * cfg.eval_iters + i) as u64;
            let (x, y) = batcher.batch(split, key, 0)?;
            sum += scalar(&model.loss(&x, &y, &Fwd::eval())?)? as f64;
        }
        out[slot] = (sum / cfg.eval_iters as f64) as f32;
    }
    ctx.dp
        .all_reduce_mean(&mut out, Site::Misc, CommKind::Other)?;
    ctx.tally.set_phase(Phase::Train);
    Ok((out[0], out[1]))
}

/// `TP_INJECT_FAULT=RANK:STEP` makes that rank fail at the start of that step: the way
/// tests check that one dying rank ends the whole job, with its message, and hangs nobody.
fn injected_fault(rank: usize, step: usize) -> Result<()> {
    let Ok(spec) = std::env::var("TP_INJECT_FAULT") else {
        return Ok(());
    };
    let parsed = spec
        .split_once(':')
        .and_then(|(r, s)| Some((r.parse::<usize>().ok()?, s.parse::<usize>().ok()?)));
    match parsed {
        Some((r, s)) if r == rank && s == step => {
            bail!("injected fault (TP_INJECT_FAULT={spec}) at step {step}")
        }
        Some(_) => Ok(()),
        None => bail!("TP_INJECT_FAULT must be RANK:STEP, got `{spec}`"),
    }
}

/// `TP_DUMP_PARAMS=DIR` writes each rank's own parameters (its shards and its copies of
/// replicated tensors) to `DIR/rank<R>.safetensors` at the end, so tests can compare
/// ranks that live in other processes.
fn dump_params_if_asked(rank: usize, reg: &crate::tp::ParamRegistry) -> Result<()> {
    let Some(dir) = std::env::var_os("TP_DUMP_PARAMS") else {
        return Ok(());
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    let tensors: std::collections::HashMap<String, Tensor> = reg
        .iter()
        .map(|p| (p.name.clone(), p.var.as_tensor().clone()))
        .collect();
    candle_core::safetensors::save(&tensors, dir.join(format!("rank{rank}.safetensors")))?;
    Ok(())
}

/// `TP_INJECT_NAN=STEP` makes the loss of that step NaN (tests of the guard).
fn injected_nan(step: usize) -> bool {
    std::env::var("TP_INJECT_NAN")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        == Some(step)
}

/// Where a run's outputs go, and where it starts from.
#[derive(Default, Clone, Copy)]
pub struct RankIo<'a> {
    /// The run directory: given to the rank that writes checkpoints (rank 0).
    pub run_dir: Option<&'a Path>,
    /// Continue from this checkpoint instead of a fresh init.
    pub resume: Option<&'a Checkpoint>,
}

fn guard(
    value: f32,
    what: &str,
    step: usize,
    last_ckpt: &Option<(usize, Option<PathBuf>)>,
) -> Result<()> {
    if value.is_finite() {
        return Ok(());
    }
    let saved = match last_ckpt {
        Some((s, Some(dir))) => format!(
            "the last good checkpoint (step {s}) is {}, intact",
            dir.display()
        ),
        Some((s, None)) => format!("the last good checkpoint is step {s}, intact"),
        None => "no checkpoint was written yet".to_string(),
    };
    bail!("{what} became {value} at step {step}, so training stopped before applying it; {saved}: lower learning_rate (or set grad_clip) and resume with --resume")
}

pub fn train_rank(
    cfg: &RunConfig,
    data: &Dataset,
    ctx: &RankContext,
    mut reporter: Option<&mut dyn Reporter>,
    opts: RankOptions,
    io: RankIo,
) -> Result<TrainOutcome> {
    let layout = cfg.layout()?;
    let mcfg = cfg.model_config(data.vocab_size())?;
    let model = match io.resume {
        Some(ck) => Gpt::build(
            &mcfg,
            &layout,
            &StoredParams {
                tensors: ck.weights.clone(),
            },
            &ctx.tp,
        )?,
        None => Gpt::build(&mcfg, &layout, &SeededInit { seed: cfg.seed }, &ctx.tp)?,
    };
    let reg = model.params();
    let logical_params = reg.logical_numel();
    let mut opt = AdamW::new(
        reg,
        AdamWConfig {
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.adam_eps,
            weight_decay: cfg.weight_decay,
        },
    );
    let (start, mut best_val) = match io.resume {
        Some(ck) => {
            let (r, n) = (ctx.tp.rank(), ctx.tp.size());
            let local = |set: &std::collections::HashMap<String, Tensor>,
                         p: &crate::tp::Param|
             -> Result<Vec<f32>> {
                let full = &set[&p.name];
                let t = match p.kind {
                    ParamKind::Sharded(spec) => spec.slice(full, r, n)?,
                    _ => full.clone(),
                };
                Ok(t.flatten_all()?.to_vec1::<f32>()?)
            };
            let m = reg
                .iter()
                .map(|p| local(&ck.m, p))
                .collect::<Result<Vec<_>>>()?;
            let v = reg
                .iter()
                .map(|p| local(&ck.v, p))
                .collect::<Result<Vec<_>>>()?;
            opt.restore(ck.meta.adam_steps, m, v)?;
            (ck.meta.step, ck.meta.best_val_loss)
        }
        None => (0, None),
    };
    let sched = CosineSchedule {
        learning_rate: cfg.learning_rate,
        min_lr: cfg.min_lr,
        warmup_iters: cfg.warmup_iters,
        lr_decay_iters: cfg.lr_decay_iters(),
        decay: cfg.decay_lr,
    };
    let batcher = Batcher {
        data,
        block_size: cfg.block_size,
        batch_size: cfg.batch_size,
        accumulation: cfg.gradient_accumulation_steps,
        dp: ctx.mesh.dp,
        dp_rank: ctx.mesh.dp_rank(),
        seed: cfg.seed,
    };
    if let Some(r) = reporter.as_deref_mut() {
        r.started(cfg, logical_params);
    }
    let mut grads = GradBuffer::new(reg);
    let mut log = Vec::new();
    let mut times = StepTimes::default();
    let mut step_ms = Vec::with_capacity(cfg.max_iters.saturating_sub(start));
    let mut step_phases = Vec::with_capacity(cfg.max_iters.saturating_sub(start));
    let mut step_ops = Vec::with_capacity(cfg.max_iters.saturating_sub(start));
    let mut step_peak_rss = Vec::with_capacity(cfg.max_iters.saturating_sub(start));
    let (mut fwd_passes, mut bwd_passes) = (0, 0);
    let accum = cfg.gradient_accumulation_steps;
    let tokens_per_step = cfg.tokens_per_step() as f64;
    let mut last_ckpt: Option<(usize, Option<PathBuf>)> =
        io.resume.map(|ck| (ck.meta.step, Some(ck.dir.clone())));
    // Only ranks of data-parallel index 0 hold what a checkpoint needs; all of them
    // take part in assembling it, rank 0 writes.
    let writes_checkpoints = ctx.mesh.dp_rank() == 0;
    let mut emit = |line: LogLine, reporter: &mut Option<&mut dyn Reporter>| -> Result<()> {
        if let Some(r) = reporter.as_deref_mut() {
            r.logged(&line)?;
        }
        log.push(line);
        Ok(())
    };

    for step in start..=cfg.max_iters {
        let eval_now =
            cfg.eval_interval > 0 && (step % cfg.eval_interval == 0 || step == cfg.max_iters);
        let mut line = LogLine {
            step,
            ..Default::default()
        };
        if eval_now {
            let (tr, va) = evaluate(&model, &batcher, cfg, ctx, step)?;
            line.eval_train_loss = Some(tr);
            line.val_loss = Some(va);
            best_val = Some(best_val.map_or(va, |b| b.min(va)));
        }
        let checkpoint_now = step > start
            && (step == cfg.max_iters
                || (cfg.checkpoint_interval > 0 && step % cfg.checkpoint_interval == 0));
        if checkpoint_now && writes_checkpoints {
            let dir = checkpoint::save(
                io.run_dir, step, cfg, &model, &opt, best_val, &ctx.tp, &ctx.tally,
            )?;
            last_ckpt = Some((step, dir));
        }
        if step == cfg.max_iters {
            if eval_now {
                emit(line, &mut reporter)?;
            }
            break;
        }

        injected_fault(ctx.mesh.rank, step)?;
        let measure_rss = ctx.mesh.rank == 0 && memory::reset_peak();
        profile::take();
        let t_step = Instant::now();
        let lr = sched.lr(step);
        grads.zero();
        let before_fwd = (times.forward, times.backward);
        let mut loss_sum = 0f32;
        for micro in 0..accum {
            let (x, y) = batcher.batch(Split::Train, step as u64, micro as u64)?;
            let fwd = Fwd {
                dropout: cfg.dropout,
                key: Some(
                    cfg.seed
                        ^ ((step * accum + micro) as u64).wrapping_mul(0x2545F4914F6CDD1D)
                        ^ ((ctx.mesh.dp_rank() as u64) << 48),
                ),
            };
            let t0 = Instant::now();
            let mut loss = model.loss(&x, &y, &fwd)?;
            if injected_nan(step) {
                loss = (loss * f64::NAN)?;
            }
            let l = scalar(&loss)?;
            guard(l, "the training loss", step, &last_ckpt)?;
            loss_sum += l;
            let t1 = Instant::now();
            let g = loss.backward()?;
            grads.accumulate(reg, &g, 1.0 / accum as f32)?;
            drop(g);
            let t2 = Instant::now();
            times.forward += (t1 - t0).as_secs_f64();
            times.backward += (t2 - t1).as_secs_f64();
            fwd_passes += 1;
            bwd_passes += 1;
        }
        let before = times;
        let t0 = Instant::now();
        grads.sync_tp_partial(&ctx.tp)?;
        grads.average_dp(&ctx.dp)?;
        let norm = grads.global_norm(&ctx.tp)?;
        guard(norm, "the gradient norm", step, &last_ckpt)?;
        if cfg.grad_clip > 0.0 && norm as f64 > cfg.grad_clip {
            grads.scale((cfg.grad_clip / (norm as f64 + 1e-6)) as f32);
        }
        let t1 = Instant::now();
        opt.step(reg, &grads, lr)?;
        let t2 = Instant::now();
        times.grad_sync += (t1 - t0).as_secs_f64();
        times.optimizer += (t2 - t1).as_secs_f64();
        times.steps += 1;
        step_phases.push([
            times.forward - before_fwd.0,
            times.backward - before_fwd.1,
            times.grad_sync - before.grad_sync,
            times.optimizer - before.optimizer,
        ]);

        let ms = t_step.elapsed().as_secs_f64() * 1e3;
        step_ms.push(ms);
        step_ops.push(profile::take());
        if let Some((_, peak)) = memory::rss_and_peak().filter(|_| measure_rss) {
            step_peak_rss.push(peak);
        }
        let tps = tokens_per_step / (ms / 1e3);
        let local_loss = loss_sum / accum as f32;
        if let Some(r) = reporter.as_deref_mut() {
            r.step_done(step, local_loss, tps);
        }
        if step % cfg.log_interval == 0 || eval_now {
            let mut l = [local_loss];
            ctx.dp
                .all_reduce_mean(&mut l, Site::Misc, CommKind::Other)?;
            line.train_loss = Some(l[0]);
            line.lr = Some(lr);
            line.ms = Some(ms);
            line.tokens_per_s = Some(tps);
        }
        if line.train_loss.is_some() || line.val_loss.is_some() {
            emit(line, &mut reporter)?;
        }
    }

    let sample_text = if opts.skip_sample || cfg.sample_tokens == 0 {
        String::new()
    } else {
        ctx.tally.set_phase(Phase::Eval);
        let tok = data.tokenizer();
        let sample_opts = SampleOptions {
            tokens: cfg.sample_tokens,
            temperature: 0.8,
            top_k: Some(200),
            seed: cfg.seed,
        };
        let ids = generate(&model, &tok.start_tokens(), &sample_opts)?;
        ctx.tally.set_phase(Phase::Train);
        tok.decode(&ids)
    };
    if let Some(r) = reporter {
        r.finished();
    }
    dump_params_if_asked(ctx.mesh.rank, reg)?;
    let params = if opts.keep_params {
        reg.iter()
            .map(|p| Ok((p.name.clone(), p.var.flatten_all()?.to_vec1::<f32>()?)))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    Ok(TrainOutcome {
        rank: ctx.mesh.rank,
        log,
        tally: ctx.tally.snapshot(),
        forward_passes: fwd_passes,
        backward_passes: bwd_passes,
        times,
        step_ms,
        step_phases,
        step_ops,
        step_peak_rss,
        sample: sample_text,
        params,
        logical_params,
        best_val_loss: best_val,
    })
}
