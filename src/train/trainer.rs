//! The Trainer: one rank's model, optimiser, gradients, schedule and batches, and the
//! things a training loop asks of them: [`Trainer::step`], [`Trainer::evaluate`], the
//! logical state a checkpoint holds ([`Trainer::logical_state`], `state.rs`) and its way back in
//! ([`Trainer::restore`]). It never branches on rank inside the model: every rank of a
//! group issues the same collectives in the same order. What a run keeps around it (the
//! checkpoint files, the tally's history, the run's wall time) is the lab's
//! (`launch/run_trainer.rs`).

pub mod state;

use super::batches::{Batches, EvalSplit};
use super::bucket_cap::BucketCap;
use super::compute_clock::ComputeClock;
use super::context::RankContext;
use super::generate::{generate, SampleOptions};
use super::grad_buckets::{backward_into, OverlappedSync};
use super::grads::GradBuffer;
use super::hooks::Hooks;
use super::host_sums::reduce_host;
use super::memory;
use super::optimizer::{AdamW, AdamWConfig};
use super::record::{EvalRecord, Phases, StepRecord};
use super::schedule::CosineSchedule;
use crate::blocks::Fwd;
use crate::comm::{Phase, Reduce, Site};
use crate::device::Kernels;
use crate::model::Gpt;
use crate::ops::profile;
use crate::tp::StoredParams;
use anyhow::Result;
use std::collections::HashMap;
use std::time::Instant;

/// What one rank's training needs besides its model, context and batches.
#[derive(Debug, Clone)]
pub struct TrainSpec {
    pub adamw: AdamWConfig,
    pub schedule: CosineSchedule,
    /// Micro-steps (forward and backward passes) per optimiser step.
    pub accumulation: usize,
    pub dropout: f64,
    /// Global gradient-norm clip (0: none).
    pub grad_clip: f64,
    /// Seeds the dropout masks (and the sampling in [`Trainer::sample`]).
    pub seed: u64,
    pub kernels: Kernels,
    /// How big the gradient buckets are whose sums start while backprop runs.
    pub grad_buckets: BucketCap,
    /// Start the gradient sums bucket by bucket while backprop runs.
    pub overlap_grad_reduce: bool,
    /// Batches of each split an evaluation averages.
    pub eval_iters: usize,
}

/// A loss or gradient norm that is not finite: the step stops before applying it.
#[derive(Debug, Clone)]
pub struct NonFinite {
    /// The step it happened at.
    pub step: usize,
    /// `the training loss` or `the gradient norm`.
    pub what: String,
    pub value: String,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} became {} at step {}, so training stopped before applying it",
            self.what, self.value, self.step
        )
    }
}

impl std::error::Error for NonFinite {}

pub struct Trainer<'a> {
    spec: TrainSpec,
    ctx: &'a RankContext,
    hooks: &'a dyn Hooks,
    model: Gpt,
    opt: AdamW,
    grads: GradBuffer,
    /// A gradient bucket's size in bytes for this rank's gradients (fixed for the run:
    /// the gradients' sizes are the model's).
    grad_bucket_bytes: usize,
    /// The gradient sums the last backward pass started, bucket by bucket.
    overlapped: Option<OverlappedSync>,
    batches: Box<dyn Batches + 'a>,
    /// Optimiser steps completed: the next step to run.
    step: usize,
    best_val: Option<f32>,
}

impl<'a> Trainer<'a> {
    /// This rank's trainer of `model` (built from a seed or stored weights), at step 0
    /// with fresh optimiser state until [`Trainer::restore`].
    pub fn new(
        spec: TrainSpec,
        model: Gpt,
        ctx: &'a RankContext,
        hooks: &'a dyn Hooks,
        batches: Box<dyn Batches + 'a>,
    ) -> Result<Self> {
        let opt = AdamW::new(model.params(), spec.adamw, spec.kernels)?;
        let grads = GradBuffer::new(model.params())?;
        Ok(Self {
            grad_bucket_bytes: spec.grad_buckets.bytes(grads.total_bytes()),
            spec,
            ctx,
            hooks,
            model,
            opt,
            grads,
            overlapped: None,
            batches,
            step: 0,
            best_val: None,
        })
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
        let (tp, dp) = (&self.ctx.tp, &self.ctx.dp);
        (self.spec.overlap_grad_reduce && OverlappedSync::needed(&self.grads, tp, dp))
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
        let iters = self.spec.eval_iters;
        let phase = tally.enter(Phase::Eval);
        let mut out = [0f32; 2];
        for (slot, split) in [EvalSplit::Train, EvalSplit::Val].into_iter().enumerate() {
            let mut sum = 0f64;
            for i in 0..iters {
                let index = (self.step * iters + i) as u64;
                let (x, y) = self.batches.eval_batch(split, index)?;
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

    /// Stops the step before a non-finite value is applied ([`NonFinite`]).
    fn guard(&self, value: f32, what: &str) -> Result<()> {
        if value.is_finite() {
            return Ok(());
        }
        Err(NonFinite {
            step: self.step,
            what: what.to_string(),
            value: value.to_string(),
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
        let lr = self.spec.schedule.lr(step);
        let mut phases = Phases::default();
        let local_loss = self.micro_steps(step, &mut phases)?;
        let t0 = Instant::now();
        let (grad_norm, grad_scale) = self.sync_and_clip()?;
        let t1 = Instant::now();
        self.update(lr, grad_scale)?;
        phases.grad_sync = (t1 - t0).as_secs_f64();
        phases.optimizer = t1.elapsed().as_secs_f64();
        let passes = self.spec.accumulation;
        self.step += 1;
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
        let accum = self.spec.accumulation;
        let tally = self.ctx.tally.clone();
        let trace = tally.trace();
        self.grads.zero();
        let mut loss_sum = 0f32;
        for micro in 0..accum {
            let (x, y) = self.batches.train_batch(step as u64, micro as u64)?;
            let fwd = Fwd {
                dropout: self.spec.dropout,
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
            let (tp, dp) = (&self.ctx.tp, &self.ctx.dp);
            self.overlapped = (micro + 1 == accum
                && self.spec.overlap_grad_reduce
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
        crate::util::seeds::pass_key(self.spec.seed, pass as u64, dp_rank)
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
        let norm = self.grads.global_norm(&self.ctx.tp, self.spec.kernels)?;
        drop(sync);
        self.guard(norm, "the gradient norm")?;
        let clip = self.spec.grad_clip;
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

    /// Text from the model after `start` (every rank takes part; identical on all of
    /// them).
    pub fn sample(&self, start: &[u32], opts: &SampleOptions) -> Result<Vec<u32>> {
        let _phase = self.ctx.tally.enter(Phase::Eval);
        generate(&self.model, start, opts)
    }
}
