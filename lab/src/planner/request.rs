//! What `tp-plan` is asked: a model, its layouts, the parallel shape and the batch, and
//! what one step of it moves and computes — the collectives of each kind from the same
//! counts a run's tally is held to (`BlockLayout::forward_allreduces`, the gradient
//! buckets' rule of `train/grad_buckets.rs`), the FLOPs by a stated convention.

use super::buckets::{seal, Buckets, Grad};
use crate::config::PRESETS;
use anyhow::Result;
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::{CommDtype, CommKind};
use tp_harness::error::user;
use tp_harness::train::bucket_cap::BucketCap;

/// A model's shape (only what the step's work depends on).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Shape {
    pub name: String,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    pub vocab: usize,
    pub block: usize,
    pub bias: bool,
}

/// GPT-2's published sizes (Radford et al. 2019, the Hugging Face configs), beside the
/// harness's own presets.
const GPT2_SIZES: [(&str, usize, usize, usize); 3] = [
    ("gpt2-medium", 24, 16, 1024),
    ("gpt2-large", 36, 20, 1280),
    ("gpt2-xl", 48, 25, 1600),
];

impl Shape {
    /// A named model: a harness preset (mini, gpt2, ...) or a larger GPT-2.
    pub fn named(name: &str) -> Result<Self> {
        if let Some(&(_, l, h, c)) = GPT2_SIZES.iter().find(|s| s.0 == name) {
            return Ok(Self {
                name: name.into(),
                n_layer: l,
                n_head: h,
                n_embd: c,
                vocab: 50257,
                block: 1024,
                bias: true,
            });
        }
        let Some(p) = PRESETS.iter().find(|p| p.name == name) else {
            let mut names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
            names.extend(GPT2_SIZES.iter().map(|s| s.0));
            return Err(user(format!(
                "unknown model `{name}`: choose one of {} (or give --n-layer, --n-head, --n-embd, --vocab, --block)",
                names.join(", ")
            )));
        };
        Ok(Self {
            name: name.into(),
            n_layer: p.n_layer,
            n_head: p.n_head,
            n_embd: p.n_embd,
            // A character corpus's vocabulary where the preset has none (tiny Shakespeare).
            vocab: p.vocab_size.unwrap_or(65),
            block: p.block_size,
            bias: p.bias,
        })
    }

    /// Parameters of the whole model (the head tied to the token embedding).
    pub fn params(&self) -> f64 {
        let (c, l) = (self.n_embd as f64, self.n_layer as f64);
        let b = if self.bias { 1.0 } else { 0.0 };
        let per_layer = 12.0 * c * c + b * 13.0 * c + 2.0 * c * (1.0 + b);
        (self.vocab + self.block) as f64 * c + l * per_layer + c * (1.0 + b)
    }
}

/// The divisors of `n` that are valid tp sizes for `n_head` heads and the other
/// dimensions: a refused tp is answered with these.
pub fn valid_tps(shape: &Shape) -> Vec<usize> {
    (1..=shape.n_head)
        .filter(|t| shape.n_head.is_multiple_of(*t) && shape.n_embd.is_multiple_of(*t))
        .collect()
}

/// One planned step's shape: the layout, tp x dp, the micro-batch on each rank, the
/// wire type of TP activations and the DDP bucket size.
#[derive(Debug, Clone)]
pub struct Request {
    pub shape: Shape,
    pub layout: BlockLayout,
    pub tp: usize,
    pub dp: usize,
    /// Sequences per rank per step (each of `shape.block` tokens).
    pub batch: usize,
    pub comm_dtype: CommDtype,
    /// The gradient buckets' size, as `ddp_bucket_mb` gives it.
    pub bucket_mb: BucketCap,
    /// How the tied embedding and LM head are laid out over the TP group.
    pub head: Head,
}

/// The tied embedding and LM head over a TP group: whole on every rank (this harness's
/// default, `vocab_parallel: false`), or split by vocabulary rows as Megatron-LM does
/// (`VocabParallelEmbedding` and its cross-entropy; `vocab_parallel: true`): each rank
/// computes its 1/tp of the head, at the cost of the lookup's sum forward, the head
/// input's gradient sum backward, and two small sums for the loss (the row maxima, then
/// the softmax sums and the target's logit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Head {
    Replicated,
    VocabParallel,
}

impl Head {
    pub fn label(self) -> &'static str {
        match self {
            Head::Replicated => "replicated on every rank",
            Head::VocabParallel => "vocabulary-parallel (Megatron's)",
        }
    }
}

/// What one step moves, per kind: (calls, bytes in total), on the TP group or the DP
/// group.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Traffic {
    pub kind: CommKind,
    pub calls: f64,
    pub bytes: f64,
    pub group: usize,
}

impl Request {
    pub fn check(&self) -> Result<()> {
        let ok = valid_tps(&self.shape);
        if !ok.contains(&self.tp) {
            let list: Vec<String> = ok.iter().map(|t| t.to_string()).collect();
            return Err(user(format!(
                "tp {} does not divide {}'s {} heads and width {}: tp may be {}",
                self.tp,
                self.shape.name,
                self.shape.n_head,
                self.shape.n_embd,
                list.join(", ")
            )));
        }
        if self.layout.n_layer() != self.shape.n_layer {
            return Err(user(format!(
                "pattern {} has {} layers but {} has {}: e.g. {}xt",
                self.layout.pattern,
                self.layout.n_layer(),
                self.shape.name,
                self.shape.n_layer,
                self.shape.n_layer
            )));
        }
        if self.dp == 0 || self.batch == 0 {
            return Err(user("--dp and --batch must be at least 1"));
        }
        Ok(())
    }

    /// Bytes one TP all-reduce of a micro-batch's activations puts in its tally: f32 and
    /// bf16 four and two bytes a value, fp8 and int8 one and a 4-byte scale a row.
    pub fn activation_bytes(&self) -> f64 {
        self.activation_bytes_of(self.shape.n_embd)
    }

    /// [`Self::activation_bytes`] of a micro-batch's rows `width` values wide.
    fn activation_bytes_of(&self, width: usize) -> f64 {
        let rows = self.batch * self.shape.block;
        self.comm_dtype.encoded_len(rows, width) as f64
    }

    /// The vocabulary rows each rank holds: all of them, or its 1/tp (the vocabulary
    /// padded to a multiple of tp, padding rows never stored).
    pub fn vocab_rows(&self) -> f64 {
        match self.head {
            Head::Replicated => self.shape.vocab as f64,
            Head::VocabParallel => self.shape.vocab.div_ceil(self.tp) as f64,
        }
    }

    /// The vocabulary-parallel head's sums a step, as training tallies them (tp/vocab.rs):
    /// forward, the lookup's `(R, C)`, the row maxima `(R)` in f32 and the loss's `(R, 2)`;
    /// backward, the head input's gradient `(R, C)`. ((forward calls, bytes), (backward
    /// calls, bytes)); nothing for a replicated head.
    pub fn head_traffic(&self) -> ((f64, f64), (f64, f64)) {
        if self.head == Head::Replicated || self.tp == 1 {
            return ((0.0, 0.0), (0.0, 0.0));
        }
        let rows = (self.batch * self.shape.block) as f64;
        let forward = self.activation_bytes() + 4.0 * rows + self.activation_bytes_of(2);
        ((3.0, forward), (1.0, self.activation_bytes()))
    }

    /// Each rank's parameters (sharded ones split over tp; the embedding replicated).
    pub fn params_per_rank(&self) -> f64 {
        let s = &self.shape;
        let (c, t) = (s.n_embd as f64, self.tp as f64);
        let b = if s.bias { 1.0 } else { 0.0 };
        let sharded = 12.0 * c * c + b * 7.0 * c;
        let per_layer: f64 = self
            .layout
            .kinds
            .iter()
            .map(|k| {
                // Two norms, and the output biases the kind has.
                let out_biases = k.tags().out_biases() as f64;
                sharded / t + 2.0 * c * (1.0 + b) + out_biases * b * c
            })
            .sum();
        (self.vocab_rows() + s.block as f64) * c + per_layer + c * (1.0 + b)
    }

    /// Parameters whose gradient each TP rank holds only its part of (an s or p block's
    /// LayerNorms, and s's `b_o`): summed over the TP group once a step.
    pub fn partial_params(&self) -> f64 {
        let c = self.shape.n_embd as f64;
        let b = if self.shape.bias { 1.0 } else { 0.0 };
        self.layout
            .kinds
            .iter()
            .map(|k| {
                let (norms, biases) = k.tags().partial();
                norms as f64 * c * (1.0 + b) + biases as f64 * b * c
            })
            .sum()
    }

    /// Each rank's gradients in the order backprop finishes them.
    fn in_backprop_order(&self) -> Vec<Grad> {
        let s = &self.shape;
        let (c, t) = (s.n_embd as f64, self.tp as f64);
        let bias = s.bias;
        let f32s = |n: f64| 4.0 * n;
        let mut out = vec![(f32s(c), false)];
        if bias {
            out.push((f32s(c), false));
        }
        for kind in self.layout.kinds.iter().rev() {
            let tags = kind.tags();
            let [ln1_partial, ln2_partial] = tags.norms_partial();
            let [b_o, b_pr] = tags.out_biases_partial();
            let norm = |out: &mut Vec<Grad>, partial: bool| {
                out.push((f32s(c), partial));
                if bias {
                    out.push((f32s(c), partial));
                }
            };
            let out_bias = |out: &mut Vec<Grad>, b: Option<bool>| {
                if let (true, Some(partial)) = (bias, b) {
                    out.push((f32s(c), partial));
                }
            };
            out_bias(&mut out, b_pr);
            out.push((f32s(4.0 * c * c / t), false));
            out.push((
                f32s(4.0 * c * c / t + if bias { 4.0 * c / t } else { 0.0 }),
                false,
            ));
            norm(&mut out, ln2_partial);
            out_bias(&mut out, b_o);
            out.push((f32s(c * c / t), false));
            out.push((
                f32s(3.0 * c * c / t + if bias { 3.0 * c / t } else { 0.0 }),
                false,
            ));
            norm(&mut out, ln1_partial);
        }
        out.push((f32s(s.block as f64 * c), false));
        out.push((f32s(self.vocab_rows() * c), false));
        out
    }

    /// The buckets a step's gradients fill ([`super::buckets`]).
    pub fn buckets(&self) -> Buckets {
        seal(self.in_backprop_order(), self.bucket_mb)
    }

    /// The step's collectives by kind (scalars — the loss, the norm — left out: a few
    /// latencies a step).
    pub fn traffic(&self) -> Vec<Traffic> {
        let mut out = Vec::new();
        let buckets = self.buckets();
        if self.tp > 1 {
            let passes = self.layout.forward_allreduces() as f64;
            // Each kind's all-reduce carries its sync width of the stream.
            let widths = self.layout.forward_allreduce_widths() as f64;
            let (head_forward, head_backward) = self.head_traffic();
            for (kind, (head_calls, head_bytes)) in [
                (CommKind::TpForward, head_forward),
                (CommKind::TpBackward, head_backward),
            ] {
                out.push(Traffic {
                    kind,
                    calls: passes + head_calls,
                    bytes: widths * self.activation_bytes() + head_bytes,
                    group: self.tp,
                });
            }
            let partial = self.partial_params();
            if partial > 0.0 {
                out.push(Traffic {
                    kind: CommKind::TpParamGrad,
                    calls: buckets.with_partial,
                    bytes: 4.0 * partial,
                    group: self.tp,
                });
            }
        }
        if self.dp > 1 {
            out.push(Traffic {
                kind: CommKind::DpGrad,
                calls: buckets.count,
                bytes: 4.0 * self.params_per_rank(),
                group: self.dp,
            });
        }
        out
    }
}

/// How attention's FLOPs are counted: Megatron-LM halves the causal score and value
/// matmuls (half the matrix is masked); torchtitan and nanoGPT's MFU count them whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlopConvention {
    Megatron,
    Full,
}

/// A step's FLOPs on one rank, split by where they run: (attention module, MLP module,
/// head and the rest) for forward; backward is twice forward.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StepFlops {
    pub attention: f64,
    pub mlp: f64,
    pub head: f64,
}

impl StepFlops {
    pub fn of(r: &Request, convention: FlopConvention) -> Self {
        let s = &r.shape;
        let tokens = (r.batch * s.block) as f64;
        let (c, t, tp) = (s.n_embd as f64, s.block as f64, r.tp as f64);
        let scores = match convention {
            FlopConvention::Megatron => 2.0 * t * c,
            FlopConvention::Full => 4.0 * t * c,
        };
        // Per layer and token: 2 FLOPs a multiply-add; Q, K, V and O are 4C^2 weights,
        // the MLP 8C^2; each rank computes its 1/tp of them, and of the head when it is
        // vocabulary-parallel.
        Self {
            attention: tokens * (8.0 * c * c + scores) / tp,
            mlp: tokens * 16.0 * c * c / tp,
            head: tokens * 2.0 * c * r.vocab_rows(),
        }
    }

    /// The whole step's forward FLOPs on the rank.
    pub fn forward(&self, n_layer: usize) -> f64 {
        n_layer as f64 * (self.attention + self.mlp) + self.head
    }

    /// Forward and backward.
    pub fn step(&self, n_layer: usize) -> f64 {
        3.0 * self.forward(n_layer)
    }
}
