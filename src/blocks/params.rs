//! The one parameter-building path of every block kind: `h.<layer>.{ln1, qkv, o, ln2, fc,
//! pr}`, named through the builder's scopes. A block kind only chooses how its replicated
//! parameters live across the TP group ([`BlockTags`]) and writes its forward formula.

use super::{add_bias, AttentionShard, BlockConfig, DropSite, Fwd, MlpShard};
use crate::ops::{Kernels, Norm, NormKind};
use crate::tp::{Init, ParamBuilder, ParamKind, Scope};
use anyhow::Result;
use candle_core::Tensor;

/// How a block kind's replicated parameters live across the TP group; `None` for an
/// output bias the kind does not have.
#[derive(Debug, Clone, Copy)]
pub struct BlockTags {
    /// LN1, before the attention.
    pub ln1: ParamKind,
    /// LN2, before the MLP.
    pub ln2: ParamKind,
    /// The attention output bias `b_o`.
    pub b_o: Option<ParamKind>,
    /// The MLP output bias `b_pr`.
    pub b_pr: Option<ParamKind>,
}

impl BlockTags {
    /// How many output biases the kind has (`b_o`, `b_pr`).
    pub fn out_biases(&self) -> usize {
        [self.b_o, self.b_pr].iter().flatten().count()
    }

    /// `b_o` and `b_pr` where the kind has them, each with whether its gradient is
    /// partial on each rank.
    pub fn out_biases_partial(&self) -> [Option<bool>; 2] {
        [self.b_o, self.b_pr].map(|b| b.map(|k| k == ParamKind::ReplicatedPartial))
    }

    /// Whether LN1's and LN2's gradients are partial on each rank.
    pub fn norms_partial(&self) -> [bool; 2] {
        [self.ln1, self.ln2].map(|k| k == ParamKind::ReplicatedPartial)
    }

    /// How many norms' gradients are partial on each rank, and how many output biases'
    /// are: what the step sums over the TP group once.
    pub fn partial(&self) -> (usize, usize) {
        let partial = |k: &ParamKind| *k == ParamKind::ReplicatedPartial;
        let biases = [self.b_o, self.b_pr];
        let biases = biases.iter().flatten().filter(|k| partial(k)).count();
        let norms = self.norms_partial().iter().filter(|&&p| p).count();
        (norms, biases)
    }
}

/// A block's parameters on this rank: its norms, its attention and MLP shards, and the
/// output biases (present only with `bias: true` and a kind that has them).
pub struct BlockParams {
    pub layer: usize,
    /// The kernels its own ops (the output biases) run on.
    pub kernels: Kernels,
    pub ln1: Norm,
    pub attn: AttentionShard,
    pub b_o: Option<Tensor>,
    pub ln2: Norm,
    pub mlp: MlpShard,
    pub b_pr: Option<Tensor>,
}

/// The name prefix of layer `layer`'s parameters: `h.<layer>` (checkpoints, golden
/// vectors and the Hugging Face mapping all use it).
pub fn layer_prefix(layer: usize) -> String {
    format!("h.{layer}")
}

/// The scope of layer `layer`.
pub fn layer_scope<'s, 'a>(b: &'s mut ParamBuilder<'a>, layer: usize) -> Scope<'s, 'a> {
    b.pp(layer_prefix(layer))
}

/// A normalisation layer `<scope>.w` (and `<scope>.b` for a LayerNorm with biases).
pub fn build_norm(s: &mut Scope, cfg: &BlockConfig, kind: ParamKind) -> Result<Norm> {
    let c = cfg.n_embd;
    let weight = s.param("w", &[c], kind, Init::Ones)?;
    let bias = if cfg.bias && cfg.norm == NormKind::Layernorm {
        Some(s.param("b", &[c], kind, Init::Zeros)?)
    } else {
        None
    };
    Ok(Norm {
        kind: cfg.norm,
        weight,
        bias,
        eps: cfg.norm_eps,
        kernels: cfg.kernels,
    })
}

impl BlockParams {
    /// A module's summed output as it joins the residual stream in `t` and `l`: dropout,
    /// then the module's bias, dropped alike.
    pub(crate) fn joined(&self, sum: &Tensor, fwd: &Fwd, at: DropSite) -> Result<Tensor> {
        let bias = match at {
            DropSite::AttnOut => self.b_o.as_ref(),
            _ => self.b_pr.as_ref(),
        };
        let x = fwd.drop(sum, self.layer, at)?;
        add_bias(self.kernels, &x, bias, fwd, self.layer, at)
    }

    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        layer: usize,
        tags: BlockTags,
    ) -> Result<Self> {
        let mut h = layer_scope(b, layer);
        let out_bias =
            |h: &mut Scope, name: &str, kind: Option<ParamKind>| -> Result<Option<Tensor>> {
                match kind {
                    Some(kind) if cfg.bias => {
                        Ok(Some(h.param(name, &[cfg.n_embd], kind, Init::Zeros)?))
                    }
                    _ => Ok(None),
                }
            };
        Ok(Self {
            layer,
            kernels: cfg.kernels,
            ln1: build_norm(&mut h.pp("ln1"), cfg, tags.ln1)?,
            attn: AttentionShard::build(&mut h, cfg, layer)?,
            b_o: out_bias(&mut h, "o.b", tags.b_o)?,
            ln2: build_norm(&mut h.pp("ln2"), cfg, tags.ln2)?,
            mlp: MlpShard::build(&mut h, cfg)?,
            b_pr: out_bias(&mut h, "pr.b", tags.b_pr)?,
        })
    }

    /// The blocks of a run of one kind: layers `first .. first + len`, each with `tags`.
    pub fn build_run(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        first: usize,
        len: usize,
        tags: BlockTags,
    ) -> Result<Vec<Self>> {
        (first..first + len)
            .map(|layer| Self::build(b, cfg, layer, tags))
            .collect()
    }
}
