//! The parameter registry: every trainable tensor of a rank, sorted by name and tagged
//! with how it lives across the TP group. The tag drives the TP gradient sum, the clipping
//! norm, weight-decay groups and checkpoints.

use super::shard::Shard;
use crate::comm::counted::{CountedComm, Reduce};
use crate::comm::tally::{CommKind, Site};
use crate::util::fnv1a;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use std::collections::{BTreeMap, HashMap};

/// How a parameter lives across the TP group (in a checkpoint's `meta.json` as
/// `{"sharded": "rows"}`, `"replicated"` or `"replicated-partial-grad"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParamKind {
    /// Each rank holds a different slice; its gradient is complete for that slice.
    Sharded(Shard),
    /// Every rank holds the whole tensor and computes its whole gradient.
    Replicated,
    /// Every rank holds the whole tensor but only its own path's share of the gradient:
    /// summed over the TP group once per step.
    #[serde(rename = "replicated-partial-grad")]
    ReplicatedPartial,
}

impl ParamKind {
    /// This rank's part of a logical tensor: its slice when sharded, else the whole. The
    /// one place weights, optimiser moments and any other parameter-shaped state are
    /// split over the TP group.
    pub fn local_part(&self, full: &Tensor, tp_rank: usize, tp_size: usize) -> Result<Tensor> {
        match self {
            ParamKind::Sharded(spec) => spec.slice(full, tp_rank, tp_size),
            _ => Ok(full.clone()),
        }
    }
}

pub struct Param {
    pub name: String,
    pub var: Var,
    pub kind: ParamKind,
    /// Shape of the logical (unsharded) tensor.
    pub full_shape: Vec<usize>,
}

/// Name-sorted registry of one rank's parameters.
#[derive(Default)]
pub struct ParamRegistry {
    params: BTreeMap<String, Param>,
}

impl ParamRegistry {
    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.params.values()
    }
    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.get(name)
    }
    pub fn len(&self) -> usize {
        self.params.len()
    }
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }
    pub fn names(&self) -> Vec<String> {
        self.params.keys().cloned().collect()
    }
    /// This rank's parts of logical parameter-shaped tensors (optimiser moments of a
    /// checkpoint), in registry order, on each parameter's device: split by the same
    /// [`ParamKind::local_part`] as the weights. Each part is a fresh copy: ranks that
    /// share one checkpoint in memory must not share the storage they update in place.
    pub fn local_parts(
        &self,
        full: &HashMap<String, Tensor>,
        tp_rank: usize,
        tp_size: usize,
    ) -> Result<Vec<Tensor>> {
        self.iter()
            .map(|p| {
                let t = full
                    .get(&p.name)
                    .with_context(|| format!("`{}` is missing", p.name))?;
                Ok(p.kind
                    .local_part(t, tp_rank, tp_size)?
                    .to_device(p.var.device())?
                    .copy()?)
            })
            .collect()
    }

    /// Number of parameters this rank holds (its shards, and every replicated tensor).
    pub fn local_numel(&self) -> usize {
        self.iter().map(|p| p.var.elem_count()).sum()
    }

    /// Number of logical parameters (every tensor counted once, at full size).
    pub fn logical_numel(&self) -> usize {
        self.iter()
            .map(|p| p.full_shape.iter().product::<usize>())
            .sum()
    }
}

/// The logical (unsharded) tensor of a parameter-shaped local tensor — the value or an
/// optimiser moment. Sharded: every rank places its slice into zeros of the full shape
/// and the group sums them (exact: each element has one non-zero term). Replicated: the
/// local tensor is already logical. Every rank of the group must call this.
pub fn gather_logical(
    local: &Tensor,
    kind: ParamKind,
    full_shape: &[usize],
    tp: &CountedComm,
) -> Result<Tensor> {
    let ParamKind::Sharded(spec) = kind else {
        return Ok(local.clone());
    };
    let placed = spec.embed(local, tp.rank(), tp.size(), full_shape)?;
    tp.all_reduce(&placed, Reduce::Sum, Site::Params, CommKind::Other)
}

/// How a parameter is initialised when no stored value is given.
#[derive(Debug, Clone, Copy)]
pub enum Init {
    Normal { std: f64 },
    Zeros,
    Ones,
}

/// Where logical parameter values come from.
pub trait ParamSource {
    fn full(&self, name: &str, shape: &[usize], init: Init) -> Result<Tensor>;
}

/// Draws each logical tensor in full from its own stream, keyed by the seed and the name,
/// so the same seed gives the same logical model whatever the tp and the build order.
pub struct SeededInit {
    pub seed: u64,
}

impl ParamSource for SeededInit {
    /// Drawn in host memory (the stream defines the values); the builder moves each
    /// rank's part to its device.
    fn full(&self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let dev = Device::Cpu;
        Ok(match init {
            Init::Zeros => Tensor::zeros(shape, DType::F32, &dev)?,
            Init::Ones => Tensor::ones(shape, DType::F32, &dev)?,
            Init::Normal { std } => {
                let n: usize = shape.iter().product();
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.seed ^ fnv1a(name));
                let dist = Normal::new(0f32, std as f32)?;
                let v: Vec<f32> = (0..n).map(|_| dist.sample(&mut rng)).collect();
                Tensor::from_vec(v, shape, &dev)?
            }
        })
    }
}

/// Stored logical tensors by name (golden vectors, checkpoints).
pub struct StoredParams {
    pub tensors: HashMap<String, Tensor>,
}

impl ParamSource for StoredParams {
    fn full(&self, name: &str, shape: &[usize], _init: Init) -> Result<Tensor> {
        let t = self
            .tensors
            .get(name)
            .with_context(|| format!("parameter `{name}` is missing from the stored weights"))?;
        if t.dims() != shape {
            bail!(
                "parameter `{name}` has shape {:?} in the stored weights but the model expects {:?}",
                t.dims(),
                shape
            );
        }
        Ok(t.to_dtype(DType::F32)?)
    }
}

/// Creates a rank's parameters on its device: draws or loads the logical tensor, keeps
/// this rank's part. Names are built by scopes, as candle-nn's `VarBuilder::pp` does:
/// `b.pp("h").pp(3).param("qkv.w", ..)` registers `h.3.qkv.w`.
pub struct ParamBuilder<'a> {
    source: &'a dyn ParamSource,
    tp_rank: usize,
    tp_size: usize,
    device: Device,
    registry: ParamRegistry,
}

impl<'a> ParamBuilder<'a> {
    pub fn new(
        source: &'a dyn ParamSource,
        tp_rank: usize,
        tp_size: usize,
        device: &Device,
    ) -> Self {
        Self {
            source,
            tp_rank,
            tp_size,
            device: device.clone(),
            registry: ParamRegistry::default(),
        }
    }

    pub fn tp_size(&self) -> usize {
        self.tp_size
    }

    pub fn tp_rank(&self) -> usize {
        self.tp_rank
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A scope whose parameters are named `prefix.NAME`.
    pub fn pp(&mut self, prefix: impl std::fmt::Display) -> Scope<'_, 'a> {
        Scope {
            builder: self,
            prefix: prefix.to_string(),
        }
    }

    /// Registers `name` and returns this rank's tensor (a variable: gradients flow to it).
    pub fn param(
        &mut self,
        name: &str,
        shape: &[usize],
        kind: ParamKind,
        init: Init,
    ) -> Result<Tensor> {
        if self.registry.params.contains_key(name) {
            bail!("parameter `{name}` registered twice");
        }
        let full = self.source.full(name, shape, init)?;
        let local = kind
            .local_part(&full, self.tp_rank, self.tp_size)?
            .to_device(&self.device)?;
        let var = Var::from_tensor(&local)?;
        let t = var.as_tensor().clone();
        self.registry.params.insert(
            name.to_string(),
            Param {
                name: name.to_string(),
                var,
                kind,
                full_shape: shape.to_vec(),
            },
        );
        Ok(t)
    }

    pub fn finish(self) -> ParamRegistry {
        self.registry
    }
}

/// A named scope of a [`ParamBuilder`].
pub struct Scope<'s, 'a> {
    builder: &'s mut ParamBuilder<'a>,
    prefix: String,
}

impl<'a> Scope<'_, 'a> {
    /// A nested scope: `prefix.sub`.
    pub fn pp(&mut self, sub: impl std::fmt::Display) -> Scope<'_, 'a> {
        Scope {
            prefix: format!("{}.{sub}", self.prefix),
            builder: self.builder,
        }
    }

    /// Registers `prefix.name` (see [`ParamBuilder::param`]).
    pub fn param(
        &mut self,
        name: &str,
        shape: &[usize],
        kind: ParamKind,
        init: Init,
    ) -> Result<Tensor> {
        let full = format!("{}.{name}", self.prefix);
        self.builder.param(&full, shape, kind, init)
    }

    pub fn tp_size(&self) -> usize {
        self.builder.tp_size
    }

    pub fn tp_rank(&self) -> usize {
        self.builder.tp_rank
    }
}
