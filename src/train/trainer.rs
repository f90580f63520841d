//! The Trainer: one rank's model, optimiser, gradients, schedule and batches, and the
//! three things a training loop asks of them: [`Trainer::step`], [`Trainer::evaluate`]
//! and [`Trainer::save_checkpoint`] (with [`Trainer::restore`] on the way in). It never
//! branches on rank inside the model: every rank of a group issues the same collectives
//! in the same order.

mod save;

use super::compute_clock::ComputeClock;
use super::context::RankContext;
use super::generate::{generate, SampleOptions};
use super::grad_buckets::{backward_into, OverlappedSync};
use super::grads::GradBuffer;
use super::hooks::Hooks;
use super::host_sums::reduce_host;
use super::memory;
use super::optimizer::{AdamW, AdamWConfig};
use super::record::{EvalRecord, Phases, StepRecord, Tallied};
use super::schedule::CosineSchedule;
use crate::blocks::Fwd;
use crate::comm::{Phase, Reduce, Site};
use crate::config::RunConfig;
use crate::data::{Batcher, Dataset, Split, EVAL_STREAM};
use crate::model::Gpt;
use crate::ops::profile;
use crate::run_dir::DivergedReport;
use crate::run_dir::{Checkpoint, CommShape, RunHistory};
use crate::tp::{SeededInit, StoredParams};
use anyhow::{bail, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// The history of `ck` if this run can continue it: tallied with the same communication
/// shape (one of another shape counts other collectives per step).
pub fn usable_history<'c>(ck: &'c Checkpoint, cfg: &RunConfig) -> Option<&'c RunHistory> {
    ck.meta
        .history
        .as_ref()
        .filter(|h| h.shape == CommShape::of(cfg))
}

/// Training stopped before applying a non-finite loss or gradient norm: the error a
/// diverging run ends with, which its run directory records (`diverged.json`).
#[derive(Debug, Clone)]
pub struct Diverged {
    pub report: DivergedReport,
    /// Where the last good weights are, in words.
    saved: String,
}

impl std::fmt::Display for Diverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.report;
        write!(
            f,
            "{} became {} at step {}, so training stopped before applying it; {}: lower learning_rate (or set grad_clip) and resume with --resume",
            r.what, r.value, r.step, self.saved
        )
    }
}

impl std::error::Error for Diverged {}

pub struct Trainer<'a> {
    cfg: &'a RunConfig,
    ctx: &'a RankContext,
    hooks: &'a dyn Hooks,
    model: Gpt,
    opt: AdamW,
    grads: GradBuffer,
    /// A gradient bucket's size in bytes: `ddp_bucket_mb` for this rank's gradients
    /// (fixed for the run: the gradients' sizes are the model's).
    grad_bucket_bytes: usize,
    /// The gradient sums the last backward pass started, bucket by bucket.
    overlapped: Option<OverlappedSync>,
    sched: CosineSchedule,
    batcher: Batcher<'a>,
    /// Optimiser steps completed: the next step to run.
    step: usize,
    best_val: Option<f32>,
    /// The newest checkpoint this run can fall back to: (step, directory on the writer).
    last_checkpoint: Option<(usize, Option<PathBuf>)>,
    /// Steps and passes the rank's tally covers (a resumed run's history included).
    tallied: Tallied,
    /// Where the rank's tally starts, for [`Trainer::take_up_history`].
    tally_start: TallyStart,
    /// The run's wall-clock seconds before this invocation (none where the checkpoint it
    /// resumed from predates the count) and when this invocation began.
    wall_before: Option<f64>,
    started: Instant,
    /// The data's fingerprint, computed when the first checkpoint is written.
    data_sha256: std::cell::OnceCell<String>,
}

/// How a run's tally starts.
enum TallyStart {
    /// From nothing (a new run), or already taken up.
    Fresh,
    /// From a resumed checkpoint's history.
    Continue(RunHistory),
    /// Empty at a resumed checkpoint whose history this run cannot continue.
    Restart,
}

impl<'a> Trainer<'a> {
    /// This rank's trainer: fresh weights from the seed, or the state of `resume`.
    pub fn new(
        cfg: &'a RunConfig,
        data: &'a Dataset,
        ctx: &'a RankContext,
        hooks: &'a dyn Hooks,
        resume: Option<&Checkpoint>,
        started: Instant,
    ) -> Result<Self> {
        let layout = cfg.layout();
        let mcfg = cfg.model_config(data.vocab_size())?;
        let model = match resume {
            Some(ck) => {
                let stored = StoredParams {
                    tensors: ck.weights.clone(),
                };
                Gpt::build_on(&mcfg, layout, &stored, &ctx.tp, &ctx.device)?
            }
            None => {
                let seeded = SeededInit {
                    seed: cfg.optim.seed,
                };
                Gpt::build_on(&mcfg, layout, &seeded, &ctx.tp, &ctx.device)?
            }
        };
        let o = &cfg.optim;
        let adamw = AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.adam_eps,
            weight_decay: o.weight_decay,
        };
        let opt = AdamW::new(model.params(), adamw, cfg.parallel.kernels)?;
        let grads = GradBuffer::new(model.params())?;
        let mut trainer = Self {
            cfg,
            ctx,
            hooks,
            opt,
            grad_bucket_bytes: cfg.parallel.ddp_bucket_mb.bytes(grads.total_bytes()),
            grads,
            overlapped: None,
            sched: CosineSchedule {
                learning_rate: o.learning_rate,
                min_lr: o.min_lr,
                warmup_iters: o.warmup_iters,
                lr_decay_iters: cfg.lr_decay_iters(),
                decay: o.decay_lr,
            },
            batcher: Batcher {
                data,
                block_size: mcfg.block_size,
                batch_size: o.batch_size,
                accumulation: o.gradient_accumulation_steps,
                dp: ctx.mesh.dp,
                dp_rank: ctx.mesh.dp_rank(),
                seed: o.seed,
                device: ctx.device.clone(),
            },
            model,
            step: 0,
            best_val: None,
            last_checkpoint: None,
            tallied: Tallied::default(),
            tally_start: TallyStart::Fresh,
            wall_before: Some(0.0),
            started,
            data_sha256: std::cell::OnceCell::new(),
        };
        if let Some(ck) = resume {
            trainer.restore(ck)?;
        }
        Ok(trainer)
    }

    /// Takes a checkpoint's optimiser state and position: the AdamW moments, split over
    /// the TP group by the same `ParamKind::local_part` as the weights, the step count,
    /// the step and the best validation loss. (The weights themselves came in through the
    /// parameter builder.)
    pub fn restore(&mut self, ck: &Checkpoint) -> Result<()> {
        let (r, n) = (self.ctx.tp.rank(), self.ctx.tp.size());
        let reg = self.model.params();
        let Some(moments) = &ck.moments else {
            bail!(
                "checkpoint {} was loaded without its optimiser state",
                ck.dir.display()
            );
        };
        let m = reg.local_parts(&moments.m, r, n)?;
        let v = reg.local_parts(&moments.v, r, n)?;
        self.opt.restore(ck.meta.adam_steps, m, v)?;
        self.step = ck.meta.step;
        self.best_val = ck.meta.best_val_loss;
        self.wall_before = ck.meta.wall_seconds;
        self.last_checkpoint = Some((ck.meta.step, Some(ck.dir.clone())));
        (self.tally_start, self.tallied) = match usable_history(ck, self.cfg) {
            Some(h) => (
                TallyStart::Continue(h.clone()),
                Tallied {
                    steps: h.steps,
                    passes: h.passes,
                },
            ),
            None => (TallyStart::Restart, Tallied::default()),
        };
        Ok(())
    }

    /// A run resumed from a checkpoint takes up its tally: what the run had communicated up
    /// to the checkpoint (its evaluation at that step included, which a resume repeats to
    /// write the same log line, so what was tallied since the resume is replaced).
    /// Without a usable history the tally starts empty at the checkpoint; a new run's
    /// tally is left as it is. Called at the first step, before its training step.
    pub fn take_up_history(&mut self) {
        match std::mem::replace(&mut self.tally_start, TallyStart::Fresh) {
            TallyStart::Fresh => {}
            TallyStart::Continue(h) => self.ctx.tally.restore(h.tally),
            TallyStart::Restart => self.ctx.tally.reset(),
        }
    }

    /// Steps and passes the tally covers so far.
    pub fn tallied(&self) -> Tallied {
        self.tallied
    }

    pub fn model(&self) -> &Gpt {
        &self.model
    }

    /// Optimiser steps completed.
    pub fn steps_done(&self) -> usize {
        self.step
    }

    pub fn best_val_loss(&self) -> Option<f32> {
        self.best_val
    }

    /// The buckets' size where backprop starts the gradient sums; `None` where they run in
    /// one bucket after it, or there is nothing to sum.
    pub fn overlapped_bucket_bytes(&self) -> Option<usize> {
        let (p, tp, dp) = (&self.cfg.parallel, &self.ctx.tp, &self.ctx.dp);
        (p.overlap_grad_reduce && OverlappedSync::needed(&self.grads, tp, dp))
            .then_some(self.grad_bucket_bytes)
    }

    /// Mean of a per-rank value over the data-parallel group.
    pub fn mean_over_dp(&self, x: f32) -> Result<f32> {
        let mut buf = [x];
        reduce_host(&self.ctx.dp, &mut buf, Reduce::Mean, Site::Misc)?;
        Ok(buf[0])
    }

    /// Mean loss over `eval_iters` batches of each split, averaged over data-parallel
    /// ranks. Batches are keyed by the step, so a resumed run evaluates on the same ones.
    pub fn evaluate(&mut self) -> Result<EvalRecord> {
        let tally = self.ctx.tally.clone();
        let _span = tally.trace().span("eval", || "evaluation".into());
        let iters = self.cfg.eval.eval_iters;
        let phase = tally.enter(Phase::Eval);
        let mut out = [0f32; 2];
        for (slot, split) in [Split::Train, Split::Val].into_iter().enumerate() {
            let mut sum = 0f64;
            for i in 0..iters {
                let key = EVAL_STREAM + (self.step * iters + i) as u64;
                let (x, y) = self.batcher.batch(split, key, 0)?;
                sum += self.model.loss(&x, &y, &Fwd::eval())?.to_scalar::<f32>()? as f64;
            }
            out[slot] = (sum / iters as f64) as f32;
        }
        reduce_host(&self.ctx.dp, &mut out, Reduce::Mean, Site::Misc)?;
        drop(phase);
        let rec = EvalRecord {
            train_loss: out[0],
            val_loss: out[1],
        };
        self.best_val = Some(self.best_val.map_or(rec.val_loss, |b| b.min(rec.val_loss)));
        Ok(rec)
    }

    /// Stops the run before a non-finite value is applied, naming the last good
    /// checkpoint ([`Diverged`]).
    fn guard(&self, value: f32, what: &str) -> Result<()> {
        if value.is_finite() {
            return Ok(());
        }
        let saved = match &self.last_checkpoint {
            Some((s, Some(dir))) => format!(
                "the last good checkpoint (step {s}) is {}, intact",
                dir.display()
            ),
            Some((s, None)) => format!("the last good checkpoint is step {s}, intact"),
            None => "no checkpoint was written yet".to_string(),
        };
        Err(Diverged {
            report: DivergedReport {
                step: self.step,
                what: what.to_string(),
                value: value.to_string(),
            },
            saved,
        }
        .into())
    }

    /// Replaces the fresh weights with another run's (`init_from`), sliced for this rank;
    /// returns the stored parameters this model has no use for (a `p` block's biases).
    pub fn load_initial_weights(
        &mut self,
        weights: &HashMap<String, candle_core::Tensor>,
    ) -> Result<Vec<String>> {
        let stored = StoredParams {
            tensors: weights.clone(),
        };
        let mcfg = self.model.cfg.clone();
        let layout = self.model.layout.clone();
        // Every parameter the pattern needs is there: the job checked it before it
        // started (launch/job.rs), with the message that names the fix.
        self.model = Gpt::build_on(&mcfg, &layout, &stored, &self.ctx.tp, &self.ctx.device)?;
        let used: std::collections::HashSet<&str> = self
            .model
            .params()
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        let mut unused: Vec<String> = weights
            .keys()
            .filter(|k| !used.contains(k.as_str()))
            .cloned()
            .collect();
        unused.sort();
        Ok(unused)
    }

    /// Waits for the GPU's queued work, so that a phase's time is its own (a GPU runs
    /// asynchronously; reading the loss already waits for the forward). No-op on the CPU.
    fn wait_for_device(&self) -> Result<()> {
        if !self.ctx.device.is_cpu() {
            self.ctx.device.synchronize()?;
        }
        Ok(())
    }

    /// One optimiser step: forward and backward over the micro-steps, the TP sum of
    /// partial gradients, the DP average, the norm and clipping, AdamW; timed around,
    /// each phase in its own function below.
    pub fn step(&mut self) -> Result<StepRecord> {
        let step = self.step;
        self.hooks.before_step(self.ctx.mesh.rank, step)?;
        let measure_rss = self.ctx.mesh.rank == 0 && memory::reset_peak();
        profile::take();
        let t_step = Instant::now();
        let tally = self.ctx.tally.clone();
        let _step_span = tally.trace().span("step", || format!("step {step}"));
        let cpu_step = ComputeClock::start(&self.ctx.device);
        let blocked = self.ctx.tally.blocked();
        let lr = self.sched.lr(step);
        let mut phases = Phases::default();
        let local_loss = self.micro_steps(step, &mut phases)?;
        let t0 = Instant::now();
        let (grad_norm, grad_scale) = self.sync_and_clip()?;
        let t1 = Instant::now();
        self.update(lr, grad_scale)?;
        phases.grad_sync = (t1 - t0).as_secs_f64();
        phases.optimizer = t1.elapsed().as_secs_f64();
        let passes = self.cfg.optim.gradient_accumulation_steps;
        self.step += 1;
        self.tallied.steps += 1;
        self.tallied.passes += passes;
        Ok(StepRecord {
            step,
            local_loss,
            lr,
            grad_norm,
            ms: t_step.elapsed().as_secs_f64() * 1e3,
            waited_ms: (self.ctx.tally.blocked() - blocked).as_secs_f64() * 1e3,
            compute_cpu_ms: cpu_step.and_then(|c| c.ms()),
            phases,
            passes,
            ops: profile::take(),
            peak_rss: memory::rss_and_peak()
                .filter(|_| measure_rss)
                .map(|(_, peak)| peak),
        })
    }

    /// The step's forward and backward passes, one per micro-step, their gradients
    /// accumulated (each scaled by 1 / micro-steps); returns the mean training loss.
    fn micro_steps(&mut self, step: usize, phases: &mut Phases) -> Result<f32> {
        let accum = self.cfg.optim.gradient_accumulation_steps;
        let tally = self.ctx.tally.clone();
        let trace = tally.trace();
        self.grads.zero();
        let mut loss_sum = 0f32;
        for micro in 0..accum {
            let (x, y) = self
                .batcher
                .batch(Split::Train, step as u64, micro as u64)?;
            let fwd = Fwd {
                dropout: self.cfg.optim.dropout,
                key: Some(self.dropout_key(step * accum + micro)),
            };
            let t0 = Instant::now();
            let forward = trace.span("pass", || format!("forward {micro}"));
            let mut loss = self.model.loss(&x, &y, &fwd)?;
            if self.hooks.poison_loss(step) {
                loss = (loss * f64::NAN)?;
            }
            let l = loss.to_scalar::<f32>()?;
            drop(forward);
            self.guard(l, "the training loss")?;
            loss_sum += l;
            let t1 = Instant::now();
            let backward = trace.span("pass", || format!("backward {micro}"));
            // The last pass finishes the gradients: their sums start as they do.
            let p = &self.cfg.parallel;
            let (tp, dp) = (&self.ctx.tp, &self.ctx.dp);
            self.overlapped = (micro + 1 == accum
                && p.overlap_grad_reduce
                && OverlappedSync::needed(&self.grads, tp, dp))
            .then(|| OverlappedSync::new(&self.grads, self.grad_bucket_bytes, tp, dp));
            let scale = 1.0 / accum as f32;
            backward_into(&loss, &mut self.grads, scale, self.overlapped.as_mut())?;
            self.wait_for_device()?;
            drop(backward);
            phases.forward += (t1 - t0).as_secs_f64();
            phases.backward += t1.elapsed().as_secs_f64();
        }
        Ok(loss_sum / accum as f32)
    }

    /// The dropout masks' key of a pass: the same on every rank of a TP group (replicas
    /// stay identical), different across data-parallel ranks and passes.
    fn dropout_key(&self, pass: usize) -> u64 {
        let dp_rank = self.ctx.mesh.dp_rank() as u64;
        crate::util::seeds::pass_key(self.cfg.optim.seed, pass as u64, dp_rank)
    }

    /// The gradients summed over TP (partial ones) and averaged over DP, and their global
    /// norm; returns it with the scale that clips it to `grad_clip`.
    fn sync_and_clip(&mut self) -> Result<(f32, f32)> {
        let tally = self.ctx.tally.clone();
        let trace = tally.trace();
        let sync = trace.span("sync", || "gradient sync".into());
        match self.overlapped.take() {
            Some(started) => started.finish(&mut self.grads)?,
            None => {
                self.grads.sync_tp_partial(&self.ctx.tp)?;
                self.grads.average_dp(&self.ctx.dp)?;
            }
        }
        let norm = self.grads.global_norm(&self.ctx.tp)?;
        drop(sync);
        self.guard(norm, "the gradient norm")?;
        let clip = self.cfg.optim.grad_clip;
        // Clipping scales the gradients as AdamW reads them (no pass of its own).
        let scale = if clip > 0.0 && norm as f64 > clip {
            (clip / (norm as f64 + 1e-6)) as f32
        } else {
            1.0
        };
        Ok((norm, scale))
    }

    /// AdamW at `lr` on the gradients scaled by `grad_scale`.
    fn update(&mut self, lr: f64, grad_scale: f32) -> Result<()> {
        let tally = self.ctx.tally.clone();
        let trace = tally.trace();
        let _update = trace.span("optimizer", || "optimizer".into());
        self.opt
            .step(self.model.params(), &self.grads, lr, grad_scale)?;
        self.wait_for_device()
    }

    /// Text from the model (every rank takes part; identical on all of them).
    pub fn sample(&self, tokens: usize) -> Result<Vec<u32>> {
        let _phase = self.ctx.tally.enter(Phase::Eval);
        let tok = self.batcher.data.tokenizer();
        let opts = SampleOptions {
            tokens,
            temperature: self.cfg.eval.sample_temperature,
            top_k: Some(self.cfg.eval.sample_top_k).filter(|&k| k > 0),
            seed: self.cfg.optim.seed,
        };
        generate(&self.model, &tok.start_tokens(), &opts)
    }
}
