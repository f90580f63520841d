//! One rank's gradients as a flat buffer in registry (name) order, and what a step does
//! with them across ranks: the TP sum of partial gradients, the DP average, the norm.
//!
//! Name order is the same on every rank, so buckets line up element for element
//! (candle's `VarMap` is a HashMap and would not).

use crate::tp::{CommKind, CountedComm, ParamKind, ParamRegistry, Site};
use anyhow::Result;
use candle_core::backprop::GradStore;

pub struct GradBuffer {
    pub data: Vec<f32>,
    /// (offset, len, kind) per parameter, in registry order.
    spans: Vec<(usize, usize, ParamKind)>,
}

impl GradBuffer {
    pub fn new(reg: &ParamRegistry) -> Self {
        let mut spans = Vec::with_capacity(reg.len());
        let mut off = 0;
        for p in reg.iter() {
            let n = p.var.elem_count();
            spans.push((off, n, p.kind));
            off += n;
        }
        Self {
            data: vec![0.0; off],
            spans,
        }
    }

    pub fn zero(&mut self) {
        self.data.fill(0.0);
    }

    /// The gradient of parameter `i` (registry order).
    pub fn slice(&self, i: usize) -> &[f32] {
        let (o, n, _) = self.spans[i];
        &self.data[o..o + n]
    }

    /// Adds `scale * grad` of every parameter from a backward pass. A parameter that the
    /// loss does not reach keeps a zero gradient.
    pub fn accumulate(&mut self, reg: &ParamRegistry, grads: &GradStore, scale: f32) -> Result<()> {
        for (p, &(o, n, _)) in reg.iter().zip(&self.spans) {
            if let Some(g) = grads.get(p.var.as_tensor()) {
                let g = g.flatten_all()?.to_vec1::<f32>()?;
                for (d, x) in self.data[o..o + n].iter_mut().zip(&g) {
                    *d += scale * x;
                }
            }
        }
        Ok(())
    }

    fn bucket(&self, pick: impl Fn(ParamKind) -> bool) -> Vec<(usize, usize)> {
        self.spans
            .iter()
            .filter(|(_, _, k)| pick(*k))
            .map(|&(o, n, _)| (o, n))
            .collect()
    }

    /// Sums the gradients of `ReplicatedPartial` parameters over the TP group in one
    /// bucketed all-reduce: after it, every rank holds the full, identical gradient.
    pub fn sync_tp_partial(&mut self, tp: &CountedComm) -> Result<()> {
        if tp.size() == 1 {
            return Ok(());
        }
        let spans = self.bucket(|k| k == ParamKind::ReplicatedPartial);
        if spans.is_empty() {
            return Ok(());
        }
        let mut flat: Vec<f32> = spans
            .iter()
            .flat_map(|&(o, n)| self.data[o..o + n].iter().copied())
            .collect();
        tp.all_reduce_sum(&mut flat, Site::Params, CommKind::TpParamGrad)?;
        let mut at = 0;
        for (o, n) in spans {
            self.data[o..o + n].copy_from_slice(&flat[at..at + n]);
            at += n;
        }
        Ok(())
    }

    /// Averages all gradients over the data-parallel group in one bucketed all-reduce.
    pub fn average_dp(&mut self, dp: &CountedComm) -> Result<()> {
        dp.all_reduce_mean(&mut self.data, Site::Params, CommKind::DpGrad)
    }

    /// Global L2 norm of the logical gradient: sharded parts summed over the TP group,
    /// each replicated parameter counted once. Call after [`Self::sync_tp_partial`].
    pub fn global_norm(&self, tp: &CountedComm) -> Result<f32> {
        let sq = |spans: Vec<(usize, usize)>| -> f64 {
            spans
                .iter()
                .flat_map(|&(o, n)| self.data[o..o + n].iter())
                .map(|&x| (x as f64) * (x as f64))
                .sum()
        };
        let sharded = sq(self.bucket(|k| matches!(k, ParamKind::Sharded(_))));
        let replicated = sq(self.bucket(|k| !matches!(k, ParamKind::Sharded(_))));
        let mut buf = [sharded as f32];
        tp.all_reduce_sum(&mut buf, Site::Params, CommKind::Other)?;
        Ok((buf[0] as f64 + replicated).sqrt() as f32)
    }

    pub fn scale(&mut self, c: f32) {
        for x in &mut self.data {
            *x *= c;
        }
    }
}
