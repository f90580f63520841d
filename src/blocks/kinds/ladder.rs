//! `l` — LadderBlock (Ladder Residual), two forward all-reduces each waited for one module
//! later, over a maximal run of consecutive `l` blocks:
//!
//! ```text
//! x1   = x + P_a                      # the previous l block's attention sum
//! P_a' = sum_r A_r(LN1(x1)) + b_o     # all-reduce 1, waited for in the next block
//! x2   = x1 + P_m                     # the previous l block's MLP sum
//! P_m' = sum_r M_r(LN2(x2)) + b_pr    # all-reduce 2, waited for in the next block
//! y    = x2 + P_a' + P_m'             # where the run ends
//! ```
//! Like `t`, every replicated parameter is used on replicated values only (tag
//! `Replicated`), and `f` after each LayerNorm all-reduces the input gradient.
//!
//! Each all-reduce is started where its module's partial output is ready and waited for
//! where the sum joins the stream, so it runs while the next module computes (on backends
//! that progress in the background: see `CountedComm::start`). The backward pass is the
//! mirror image: each module's input-gradient all-reduce (`f`'s) is started where the
//! module's backward ends and waited for after the previous module's backward, where the
//! LayerNorm's backward adds it to the stream's gradient. Candle's backprop cannot wait
//! for a gradient a module later, so the run's backward is driven here ([`backward`]):
//! the forward pass computes each piece (the norm, the module, the join) from a leaf of
//! its own and [`join_hand_backward`] joins the run to the graph as one node.

use crate::blocks::spec::{Hiding, KindSpec, Reference, Stage, Syncs};
use crate::blocks::{BlockConfig, BlockParams, BlockTags, DropSite, Fwd};
use crate::comm::{CommKind, CountedComm, Reduce, Site, Started};
use crate::ops::hand_backward::{join_hand_backward, Backward};
use crate::tp::{into_candle, ParamBuilder};
use anyhow::Result;
use candle_core::{Tensor, TensorId, Var};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// As `t`'s: every replicated parameter is used on replicated values only.
pub const TAGS: BlockTags = super::tp_block::TAGS;

/// A maximal run of `l` blocks: layers `first .. first + len`.
/// Every fact of the kind (`blocks/spec.rs`).
pub const SPEC: KindSpec = KindSpec {
    letter: 'l',
    name: "LadderBlock",
    line: "2 all-reduces, each hidden behind the next module",
    syncs: Syncs::PerBlock(2),
    // It waits only at the end of its run (its last MLP sum).
    exposed_syncs: Syncs::PerRun(1),
    hiding: Hiding::BehindNextModule,
    sync_width: 1,
    depends_on_tp: false,
    tags: TAGS,
    staged_by_run: true,
    build: |b, cfg, first, len, tp| Ok(Box::new(LadderRun::build(b, cfg, first, len, tp)?)),
    reference: Reference::Literal('l'),
    exported: true,
    keeps_stream_replicated: true,
};

pub struct LadderRun {
    blocks: Vec<BlockParams>,
    tp: CountedComm,
}

/// One module (attention or MLP) of the run as the forward pass leaves it for the
/// backward: each piece computed from a leaf of its own.
struct ModuleTape {
    site: Site,
    /// The stream it read (a leaf) and its normalisation of it.
    stream: Tensor,
    normed: Tensor,
    /// That normalisation as the module read it (a leaf), and the module's partial output.
    input: Tensor,
    partial: Tensor,
    /// The group's sum of the partial (a leaf) and what joined the stream: dropout, bias.
    sum: Tensor,
    joined: Tensor,
}

/// A leaf of its own holding `t`'s values: backprop stops at it and gives its gradient.
fn leaf(t: &Tensor) -> Result<Tensor> {
    Ok(Var::from_tensor(&t.detach())?.as_tensor().clone())
}

impl LadderRun {
    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        first: usize,
        len: usize,
        tp: &CountedComm,
    ) -> Result<Self> {
        let blocks = BlockParams::build_run(b, cfg, first, len, TAGS)?;
        Ok(Self {
            blocks,
            tp: tp.clone(),
        })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let mut stream = x.detach();
        let mut tapes: Vec<ModuleTape> = Vec::with_capacity(2 * self.blocks.len());
        // Sums in flight: (module, its block, where it joins, the started all-reduce).
        let mut in_flight: VecDeque<(usize, &BlockParams, DropSite, Started<Tensor>)> =
            VecDeque::new();
        let trace = self.tp.tally().trace();
        for blk in &self.blocks {
            let site = Site::Layer(blk.layer);
            let _span = trace.span("block", || format!("layer {} (l)", blk.layer));
            for at in [DropSite::AttnOut, DropSite::MlpOut] {
                // The sum started two modules ago joins: one module computed meanwhile.
                if in_flight.len() == 2 {
                    let (k, blk, at, sum) = in_flight.pop_front().expect("two in flight");
                    stream = (stream + Self::join(&mut tapes[k], blk, at, sum, fwd)?)?;
                }
                let stream_leaf = leaf(&stream)?;
                let (normed, input, partial) = match at {
                    DropSite::AttnOut => {
                        let normed = blk.ln1.forward(&stream_leaf)?;
                        let input = leaf(&normed)?;
                        let partial = blk.attn.forward(&input, fwd)?;
                        (normed, input, partial)
                    }
                    _ => {
                        let normed = blk.ln2.forward(&stream_leaf)?;
                        let input = leaf(&normed)?;
                        let partial = blk.mlp.forward(&input)?;
                        (normed, input, partial)
                    }
                };
                let partial = partial.contiguous()?;
                let kind = CommKind::TpForward;
                let sum = self.tp.start(&partial, Reduce::Activation, site, kind)?;
                in_flight.push_back((tapes.len(), blk, at, sum));
                tapes.push(ModuleTape {
                    site,
                    stream: stream_leaf,
                    normed,
                    input,
                    sum: partial.clone(),
                    joined: partial.clone(),
                    partial,
                });
            }
        }
        while let Some((k, blk, at, sum)) = in_flight.pop_front() {
            stream = (stream + Self::join(&mut tapes[k], blk, at, sum, fwd)?)?;
        }
        let params = parameters(&tapes);
        let (tp, read) = (self.tp.clone(), params.clone());
        let backward: Arc<Backward> =
            Arc::new(move |dy: &Tensor| backward(&tapes, &read, &tp, dy).map_err(into_candle));
        Ok(join_hand_backward(x, &stream, &params, backward)?)
    }

    /// Module `tape`'s started sum as it joins the stream: waited for, taken as a leaf,
    /// dropout, then its bias (as `t` adds them). Returns the values that join.
    fn join(
        tape: &mut ModuleTape,
        blk: &BlockParams,
        at: DropSite,
        sum: Started<Tensor>,
        fwd: &Fwd,
    ) -> Result<Tensor> {
        tape.sum = leaf(&sum.wait()?)?;
        tape.joined = blk.joined(&tape.sum, fwd, at)?;
        Ok(tape.joined.detach())
    }
}

/// The parameters the run's pieces read: the variables their graphs reach, less the
/// pieces' own leaves.
fn parameters(tapes: &[ModuleTape]) -> Vec<Tensor> {
    let leaves: Vec<TensorId> = tapes
        .iter()
        .flat_map(|t| [t.stream.id(), t.input.id(), t.sum.id()])
        .collect();
    let mut seen = Vec::new();
    let mut params = Vec::new();
    for t in tapes {
        for piece in [&t.normed, &t.partial, &t.joined] {
            for node in piece.sorted_nodes() {
                let id = node.id();
                if node.is_variable() && !leaves.contains(&id) && !seen.contains(&id) {
                    seen.push(id);
                    params.push(node.clone());
                }
            }
        }
    }
    params
}

/// The run's backward from `dy`, its output's gradient: the mirror of its forward. With
/// `dr[k]` the gradient of the stream module `k` read (`dr[K]` and `dr[K + 1]`, past the
/// last module, are `dy`), module `k`'s output joined the stream two modules on, so its
/// output gradient is `dr[k + 2]`; its input-gradient all-reduce is started, module
/// `k - 1`'s backward runs meanwhile (it needs only `dr[k + 1]`), and then the sum goes
/// through module `k`'s norm into `dr[k] = dr[k + 1] + norm'`. Returns the run's input
/// gradient and its parameters' gradients.
fn backward(
    tapes: &[ModuleTape],
    params: &[Tensor],
    tp: &CountedComm,
    dy: &Tensor,
) -> Result<(Tensor, HashMap<TensorId, Tensor>)> {
    let n = tapes.len();
    let mut grads: HashMap<TensorId, Tensor> = HashMap::new();
    let mut dr: Vec<Option<Tensor>> = vec![None; n + 2];
    dr[n] = Some(dy.clone());
    dr[n + 1] = Some(dy.clone());
    // Runs `piece`'s backward from `grad`, keeps its parameters' gradients, and returns
    // the gradient of its leaf `of`.
    let mut through = |piece: &Tensor, grad: &Tensor, of: &Tensor| -> Result<Tensor> {
        let store = piece.backward_from(grad, |_, _| Ok(()))?;
        for p in params {
            if let Some(g) = store.get(p) {
                let g = match grads.remove(&p.id()) {
                    Some(before) => (before + g)?,
                    None => g.clone(),
                };
                grads.insert(p.id(), g);
            }
        }
        match store.get(of) {
            Some(g) => Ok(g.clone()),
            None => Ok(of.zeros_like()?),
        }
    };
    let mut pending: Option<(usize, Started<Tensor>)> = None;
    for k in (0..n).rev() {
        let t = &tapes[k];
        let d_out = dr[k + 2].clone().expect("filled a module ago");
        let d_sum = through(&t.joined, &d_out, &t.sum)?;
        let d_input = through(&t.partial, &d_sum, &t.input)?;
        let reduce = Reduce::Activation;
        let started = tp.start(&d_input, reduce, t.site, CommKind::TpBackward)?;
        if let Some((j, sum)) = pending.replace((k, started)) {
            let c = through(&tapes[j].normed, &sum.wait()?, &tapes[j].stream)?;
            dr[j] = Some((dr[j + 1].as_ref().expect("after it") + c)?);
        }
    }
    if let Some((j, sum)) = pending {
        let c = through(&tapes[j].normed, &sum.wait()?, &tapes[j].stream)?;
        dr[j] = Some((dr[j + 1].as_ref().expect("after it") + c)?);
    }
    let dx = dr.swap_remove(0).unwrap_or_else(|| dy.clone());
    Ok((dx, grads))
}

impl Stage for LadderRun {
    fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        LadderRun::forward(self, x, fwd)
    }
}
