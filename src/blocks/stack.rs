//! The block stack a pattern describes: each block its own stage, or each maximal run of
//! a kind staged by run (`p`, `l`) one stage; every stage built by its kind's spec.

use super::replicas::ReplicaProbe;
use super::spec::Stage;
use super::{BlockConfig, BlockKind, BlockLayout, Fwd};
use crate::comm::CountedComm;
use crate::tp::{trace_mark, MarkAt, ParamBuilder};
use anyhow::Result;
use candle_core::Tensor;
use std::sync::Arc;

pub struct BlockStack {
    stages: Vec<Box<dyn Stage>>,
    /// Each stage as the trace names it: `layer 3 (t)`, `layers 4-7 (p)`.
    labels: Vec<String>,
    /// The rank's group, whose tally holds its trace.
    tp: CountedComm,
    /// Where each stage's output is recorded for the replicated-activation check (tests).
    probe: Option<Arc<ReplicaProbe>>,
}

/// A stage of `len` blocks of `kind` from layer `first`, as a trace names it.
fn label(first: usize, len: usize, kind: BlockKind) -> String {
    match len {
        1 => format!("layer {first} ({kind})"),
        _ => format!("layers {first}-{} ({kind})", first + len - 1),
    }
}

impl BlockStack {
    pub fn build(
        layout: &BlockLayout,
        cfg: &BlockConfig,
        b: &mut ParamBuilder,
        tp: &CountedComm,
    ) -> Result<Self> {
        let (mut stages, mut labels) = (Vec::new(), Vec::new());
        for (kind, i, len) in layout.stages() {
            stages.push((kind.spec().build)(b, cfg, i, len, tp)?);
            labels.push(label(i, len, kind));
        }
        Ok(Self {
            stages,
            labels,
            tp: tp.clone(),
            probe: None,
        })
    }

    /// Records every stage's output in `probe` (the replicated-activation check).
    pub fn watch(&mut self, probe: Arc<ReplicaProbe>) {
        self.probe = Some(probe);
    }

    /// Each stage in turn; on a traced step, each as a span of the rank's timeline, its
    /// backward marked at its input and output.
    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let mut x = x.clone();
        let trace = self.tp.tally().trace();
        for (stage, label) in self.stages.iter().zip(&self.labels) {
            let _span = trace.span("layer", || format!("{label} forward"));
            let input = trace_mark(&x, &self.tp, label, MarkAt::Input)?;
            let out = stage.forward(&input, fwd)?;
            x = trace_mark(&out, &self.tp, label, MarkAt::Output)?;
            if let Some(probe) = &self.probe {
                probe.record(self.tp.rank(), label, &x)?;
            }
        }
        Ok(x)
    }
}
