//! A run's trainer: the engine's [`Trainer`] built from the run's config, data and
//! checkpoint, and what a run keeps around it: the checkpoint files it writes, the
//! communication tally's history across resumes, the run's wall time, and the line a
//! diverging run ends with (naming the last good checkpoint).

use crate::config::RunConfig;
use crate::data::{Batcher, Dataset};
use crate::run_dir::checkpoint::{self, CheckpointState, CheckpointTensors, ParamInfo};
use crate::run_dir::{Checkpoint, CommShape, DivergedReport, RunHistory};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tp_harness::model::Gpt;
use tp_harness::tp::{SeededInit, StoredParams};
use tp_harness::train::context::RankContext;
use tp_harness::train::generate::SampleOptions;
use tp_harness::train::hooks::Hooks;
use tp_harness::train::optimizer::AdamWConfig;
use tp_harness::train::record::{EvalRecord, StepRecord, Tallied};
use tp_harness::train::schedule::CosineSchedule;
use tp_harness::train::trainer::{NonFinite, TrainSpec, Trainer};

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

/// The engine's settings of one rank's training, read from the run's config.
pub fn train_spec(cfg: &RunConfig) -> TrainSpec {
    let o = &cfg.optim;
    TrainSpec {
        adamw: AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.adam_eps,
            weight_decay: o.weight_decay,
        },
        schedule: CosineSchedule {
            learning_rate: o.learning_rate,
            min_lr: o.min_lr,
            warmup_iters: o.warmup_iters,
            lr_decay_iters: cfg.lr_decay_iters(),
            decay: o.decay_lr,
        },
        accumulation: o.gradient_accumulation_steps,
        dropout: o.dropout,
        grad_clip: o.grad_clip,
        seed: o.seed,
        kernels: cfg.parallel.kernels,
        grad_buckets: cfg.parallel.ddp_bucket_mb,
        overlap_grad_reduce: cfg.parallel.overlap_grad_reduce,
        eval_iters: cfg.eval.eval_iters,
    }
}

pub struct RunTrainer<'a> {
    trainer: Trainer<'a>,
    cfg: &'a RunConfig,
    data: &'a Dataset,
    hooks: &'a dyn Hooks,
    ctx: &'a RankContext,
    /// The newest checkpoint this run can fall back to: (step, directory on the writer).
    last_checkpoint: Option<(usize, Option<PathBuf>)>,
    /// Steps and passes the rank's tally covers (a resumed run's history included).
    tallied: Tallied,
    /// Where the rank's tally starts, for [`RunTrainer::take_up_history`].
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

impl<'a> RunTrainer<'a> {
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
        let batcher = Batcher {
            data,
            block_size: mcfg.block_size,
            batch_size: o.batch_size,
            accumulation: o.gradient_accumulation_steps,
            dp: ctx.mesh.dp,
            dp_rank: ctx.mesh.dp_rank(),
            seed: o.seed,
            device: ctx.device.clone(),
        };
        let trainer = Trainer::new(train_spec(cfg), model, ctx, hooks, Box::new(batcher))?;
        let mut run = Self {
            trainer,
            cfg,
            data,
            hooks,
            ctx,
            last_checkpoint: None,
            tallied: Tallied::default(),
            tally_start: TallyStart::Fresh,
            wall_before: Some(0.0),
            started,
            data_sha256: std::cell::OnceCell::new(),
        };
        if let Some(ck) = resume {
            run.restore(ck)?;
        }
        Ok(run)
    }

    /// Takes a checkpoint's optimiser state and position, and where its tally's history
    /// stands.
    fn restore(&mut self, ck: &Checkpoint) -> Result<()> {
        let Some(moments) = &ck.moments else {
            bail!(
                "checkpoint {} was loaded without its optimiser state",
                ck.dir.display()
            );
        };
        let meta = &ck.meta;
        self.trainer.restore(
            meta.adam_steps,
            &moments.m,
            &moments.v,
            meta.step,
            meta.best_val_loss,
        )?;
        self.wall_before = meta.wall_seconds;
        self.last_checkpoint = Some((meta.step, Some(ck.dir.clone())));
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

    /// The engine's trainer (the model, the step count, the best validation loss).
    pub fn trainer(&self) -> &Trainer<'a> {
        &self.trainer
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

    /// One optimiser step; a non-finite loss or norm ends the run as [`Diverged`].
    pub fn step(&mut self) -> Result<StepRecord> {
        let rec = self
            .trainer
            .step()
            .map_err(|e| match e.downcast::<NonFinite>() {
                Ok(n) => self.diverged(n).into(),
                Err(e) => e,
            })?;
        self.tallied.steps += 1;
        self.tallied.passes += rec.passes;
        Ok(rec)
    }

    fn diverged(&self, n: NonFinite) -> Diverged {
        let saved = match &self.last_checkpoint {
            Some((s, Some(dir))) => format!(
                "the last good checkpoint (step {s}) is {}, intact",
                dir.display()
            ),
            Some((s, None)) => format!("the last good checkpoint is step {s}, intact"),
            None => "no checkpoint was written yet".to_string(),
        };
        Diverged {
            report: DivergedReport {
                step: n.step,
                what: n.what,
                value: n.value,
            },
            saved,
        }
    }

    pub fn evaluate(&mut self) -> Result<EvalRecord> {
        self.trainer.evaluate()
    }

    /// Replaces the fresh weights with another run's (`init_from`); returns the stored
    /// parameters this model has no use for.
    pub fn load_initial_weights(
        &mut self,
        weights: &std::collections::HashMap<String, candle_core::Tensor>,
    ) -> Result<Vec<String>> {
        self.trainer.load_initial_weights(weights)
    }

    /// Text from the model after the tokenizer's start (every rank takes part).
    pub fn sample(&self, tokens: usize) -> Result<Vec<u32>> {
        let opts = SampleOptions {
            tokens,
            temperature: self.cfg.eval.sample_temperature,
            top_k: Some(self.cfg.eval.sample_top_k).filter(|&k| k > 0),
            seed: self.cfg.optim.seed,
        };
        let start = self.data.tokenizer().start_tokens();
        self.trainer.sample(&start, &opts)
    }

    /// Saves the state after the steps completed so far. Every rank of the TP group calls
    /// this (sharded tensors are assembled collectively); the rank given `root` writes.
    /// Returns the checkpoint directory on the writing rank.
    pub fn save_checkpoint(&mut self, root: Option<&Path>) -> Result<Option<PathBuf>> {
        let state = self.trainer.logical_state()?;
        let dir = match root {
            None => None,
            Some(root) => {
                // Taken after the gathers above: the history includes this checkpoint's.
                let history = RunHistory {
                    steps: self.tallied.steps,
                    passes: self.tallied.passes,
                    shape: CommShape::of(self.cfg),
                    tally: self.ctx.tally.snapshot(),
                };
                let meta = CheckpointState {
                    step: state.step,
                    config: self.cfg,
                    adam_steps: state.adam_steps,
                    best_val_loss: state.best_val_loss,
                    history: Some(history),
                    wall_seconds: self
                        .wall_before
                        .map(|b| b + self.started.elapsed().as_secs_f64()),
                    data_sha256: Some(
                        self.data_sha256
                            .get_or_init(|| self.data.fingerprint())
                            .clone(),
                    ),
                    pause_mid_write: self.hooks.checkpoint_pause(),
                };
                let tensors = CheckpointTensors {
                    params: (state.params.iter())
                        .map(|(name, shape, kind)| ParamInfo {
                            name: name.clone(),
                            shape: shape.clone(),
                            kind: Some(*kind),
                        })
                        .collect(),
                    weights: state.weights,
                    m: state.m,
                    v: state.v,
                };
                Some(checkpoint::write(root, meta, tensors)?)
            }
        };
        self.last_checkpoint = Some((state.step, dir.clone()));
        Ok(dir)
    }
}
