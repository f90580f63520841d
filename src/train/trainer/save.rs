//! A checkpoint of the trainer's state: every rank of the TP group assembles the logical
//! tensors (weights and AdamW moments), the writing rank adds the run's history and writes.

use super::Trainer;
use crate::comm::Phase;
use crate::run_dir::checkpoint::{self, CheckpointState, CheckpointTensors, ParamInfo};
use crate::run_dir::{CommShape, RunHistory};
use crate::tp::gather_logical;
use anyhow::Result;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

impl Trainer<'_> {
    /// Saves the state after the steps completed so far. Every rank of the TP group calls
    /// this (sharded tensors are assembled collectively); the rank given `root` writes.
    /// Returns the checkpoint directory on the writing rank.
    pub fn save_checkpoint(&mut self, root: Option<&Path>) -> Result<Option<PathBuf>> {
        let tp = &self.ctx.tp;
        let phase = self.ctx.tally.enter(Phase::Eval);
        let mut tensors = CheckpointTensors {
            weights: HashMap::new(),
            m: HashMap::new(),
            v: HashMap::new(),
            params: Vec::new(),
        };
        for (i, p) in self.model.params().iter().enumerate() {
            let logical = |t: &candle_core::Tensor| gather_logical(t, p.kind, &p.full_shape, tp);
            tensors
                .weights
                .insert(p.name.clone(), logical(p.var.as_tensor())?);
            tensors.m.insert(p.name.clone(), logical(&self.opt.m[i])?);
            tensors.v.insert(p.name.clone(), logical(&self.opt.v[i])?);
            tensors.params.push(ParamInfo {
                name: p.name.clone(),
                shape: p.full_shape.clone(),
                kind: Some(p.kind),
            });
        }
        drop(phase);
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
                let state = CheckpointState {
                    step: self.step,
                    config: self.cfg,
                    adam_steps: self.opt.t,
                    best_val_loss: self.best_val,
                    history: Some(history),
                    wall_seconds: self
                        .wall_before
                        .map(|b| b + self.started.elapsed().as_secs_f64()),
                    data_sha256: Some(
                        self.data_sha256
                            .get_or_init(|| self.batcher.data.fingerprint())
                            .clone(),
                    ),
                    pause_mid_write: self.hooks.checkpoint_pause(),
                };
                Some(checkpoint::write(root, state, tensors)?)
            }
        };
        self.last_checkpoint = Some((self.step, dir.clone()));
        Ok(dir)
    }
}
