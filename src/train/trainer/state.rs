//! The trainer's state as a checkpoint holds it: every rank of the TP group assembles the
//! logical (unsharded) tensors, weights and AdamW moments, so they load at any tp; and the
//! way back in, each rank taking its part by the same `ParamKind::local_part` as the
//! weights.

use super::Trainer;
use crate::comm::Phase;
use crate::tp::{gather_logical, ParamKind};
use anyhow::Result;
use candle_core::Tensor;
use std::collections::HashMap;

/// The logical tensors of a trainer's state, by parameter name, and what they are.
pub struct LogicalState {
    pub weights: HashMap<String, Tensor>,
    pub m: HashMap<String, Tensor>,
    pub v: HashMap<String, Tensor>,
    /// Each parameter's name, logical shape and kind, in the model's order.
    pub params: Vec<(String, Vec<usize>, ParamKind)>,
    /// AdamW steps taken.
    pub adam_steps: u64,
    /// Optimiser steps completed.
    pub step: usize,
    pub best_val_loss: Option<f32>,
}

impl Trainer<'_> {
    /// The state after the steps completed so far. Every rank of the TP group calls this:
    /// sharded tensors are assembled collectively.
    pub fn logical_state(&self) -> Result<LogicalState> {
        let tp = &self.ctx.tp;
        let _phase = self.ctx.tally.enter(Phase::Eval);
        let mut state = LogicalState {
            weights: HashMap::new(),
            m: HashMap::new(),
            v: HashMap::new(),
            params: Vec::new(),
            adam_steps: self.opt.t,
            step: self.step,
            best_val_loss: self.best_val,
        };
        for (i, p) in self.model.params().iter().enumerate() {
            let logical = |t: &Tensor| gather_logical(t, p.kind, &p.full_shape, tp);
            state
                .weights
                .insert(p.name.clone(), logical(p.var.as_tensor())?);
            state.m.insert(p.name.clone(), logical(&self.opt.m[i])?);
            state.v.insert(p.name.clone(), logical(&self.opt.v[i])?);
            state
                .params
                .push((p.name.clone(), p.full_shape.clone(), p.kind));
        }
        Ok(state)
    }

    /// Takes up a stored state's optimiser and position: the AdamW moments `m` and `v`
    /// (logical, by name), its step count, the step and the best validation loss. (The
    /// weights themselves came in through the model's parameter builder.)
    pub fn restore(
        &mut self,
        adam_steps: u64,
        m: &HashMap<String, Tensor>,
        v: &HashMap<String, Tensor>,
        step: usize,
        best_val_loss: Option<f32>,
    ) -> Result<()> {
        let (r, n) = (self.ctx.tp.rank(), self.ctx.tp.size());
        let reg = self.model.params();
        let m = reg.local_parts(m, r, n)?;
        let v = reg.local_parts(v, r, n)?;
        self.opt.restore(adam_steps, m, v)?;
        self.step = step;
        self.best_val = best_val_loss;
        Ok(())
    }
}
