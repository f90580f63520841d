//! GPT-2: token and learned position embeddings, the block stack a pattern describes,
//! a final norm and the LM head tied to the token embedding.
//!
//! Parameter names (shared with the golden vectors and checkpoints): `wte` (V, C), `wpe`
//! (T, C), `lnf.w/.b`, and per layer `h.i.{ln1,qkv,o,ln2,fc,pr}.{w,b}` with linear
//! weights stored (in, out).
//!
//! With `vocab_parallel` each rank holds its vocabulary rows of `wte` ([`VocabShard`]):
//! the lookup, the head and the loss then communicate at the `embedding` and `head`
//! sites instead of every rank computing all `V` logits.

use super::config::ModelConfig;
use crate::blocks::params::build_norm;
use crate::blocks::{BlockLayout, BlockStack, Fwd};
use crate::comm::CountedComm;
use crate::ops::{self, Norm};
use crate::tp::{Init, ParamBuilder, ParamKind, ParamRegistry, ParamSource, Shard, VocabShard};
use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor};

pub struct Gpt {
    pub cfg: ModelConfig,
    pub layout: BlockLayout,
    /// The tied embedding/head: all `V` rows, or this rank's rows under `vocab`.
    wte: Tensor,
    /// This rank's vocabulary rows when the table is vocab-parallel.
    vocab: Option<VocabShard>,
    tp: CountedComm,
    wpe: Tensor,
    stack: BlockStack,
    lnf: Norm,
    params: ParamRegistry,
}

impl Gpt {
    /// Builds this rank's model on the CPU.
    pub fn build(
        cfg: &ModelConfig,
        layout: &BlockLayout,
        source: &dyn ParamSource,
        tp: &CountedComm,
    ) -> Result<Self> {
        Self::build_on(cfg, layout, source, tp, &Device::Cpu)
    }

    /// Builds this rank's model on `device`: logical weights from `source`, sliced for
    /// `tp`'s rank.
    pub fn build_on(
        cfg: &ModelConfig,
        layout: &BlockLayout,
        source: &dyn ParamSource,
        tp: &CountedComm,
        device: &Device,
    ) -> Result<Self> {
        layout
            .agrees_with_n_layer(cfg.n_layer)
            .map_err(anyhow::Error::msg)?;
        cfg.check(tp.size())?;
        let (v, t, c) = (cfg.vocab_size, cfg.block_size, cfg.n_embd);
        let mut b = ParamBuilder::new(source, tp.rank(), tp.size(), device);
        let rep = ParamKind::Replicated;
        let (vocab, wte_kind) = if cfg.vocab_parallel {
            let shard = VocabShard::new(v, tp.rank(), tp.size())?;
            (Some(shard), ParamKind::Sharded(Shard::PaddedRows))
        } else {
            (None, rep)
        };
        let wte = b.param("wte", &[v, c], wte_kind, Init::Normal { std: 0.02 })?;
        let wpe = b.param("wpe", &[t, c], rep, Init::Normal { std: 0.02 })?;
        let block_cfg = cfg.block_config();
        let stack = BlockStack::build(layout, &block_cfg, &mut b, tp)?;
        let lnf = build_norm(&mut b.pp("lnf"), &block_cfg, rep)?;
        Ok(Self {
            cfg: cfg.clone(),
            layout: layout.clone(),
            wte,
            vocab,
            tp: tp.clone(),
            wpe,
            stack,
            lnf,
            params: b.finish(),
        })
    }

    pub fn params(&self) -> &ParamRegistry {
        &self.params
    }

    /// The device the model's parameters live on.
    pub fn device(&self) -> &Device {
        self.wte.device()
    }

    /// Records every stage's output in `probe`: the replicated-activation check.
    pub fn watch_replicas(&mut self, probe: std::sync::Arc<crate::blocks::ReplicaProbe>) {
        self.stack.watch(probe);
    }

    /// `idx (B, T)` u32 -> token + position embeddings `(B, T, C)`.
    pub fn embed(&self, idx: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let (b, t) = idx.dims2()?;
        if t > self.cfg.block_size {
            bail!(
                "sequence of {t} tokens is longer than block_size {}",
                self.cfg.block_size
            );
        }
        let ids = idx.flatten_all()?;
        let tok = match &self.vocab {
            Some(shard) => shard.embed(&self.wte, &ids, &self.tp)?,
            None => ops::embedding(self.cfg.kernels, &self.wte, &ids)?,
        };
        let tok = tok.reshape((b, t, self.cfg.n_embd))?;
        let x = tok.broadcast_add(&self.wpe.narrow(0, 0, t)?)?;
        if fwd.active() {
            let key = fwd.key.unwrap_or(0) ^ 0xE3B0_C442;
            return Ok(ops::dropout(&x, fwd.dropout, key)?);
        }
        Ok(x)
    }

    /// Embeddings `(B, T, C)` -> final hidden states `(B*T, C)` in the compute dtype.
    fn hidden(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let (b, t, c) = x.dims3()?;
        // The passes run in the compute dtype; logits come back in f32 for the loss.
        let x = x.to_dtype(self.cfg.dtype.dtype())?;
        let h = self.lnf.forward(&self.stack.forward(&x, fwd)?)?;
        Ok(h.reshape((b * t, c))?)
    }

    /// Hidden states `(R, C)` -> this rank's logits in f32: all `V` columns, or its
    /// vocabulary slice when vocab-parallel.
    fn head(&self, h: &Tensor) -> Result<Tensor> {
        Ok(self.head_in_compute_dtype(h)?.to_dtype(DType::F32)?)
    }

    /// [`Self::head`]'s logits before their cast to f32 (bf16 in a bf16 pass).
    fn head_in_compute_dtype(&self, h: &Tensor) -> Result<Tensor> {
        let k = self.cfg.kernels;
        Ok(match &self.vocab {
            Some(shard) => shard.logits(k, h, &self.wte, &self.tp)?,
            None => ops::linear_t(k, h, &self.wte, None)?,
        })
    }

    /// All `V` logits of rows whose slices the ranks hold (the identity when replicated).
    fn whole_logits(&self, logits: Tensor) -> Result<Tensor> {
        match &self.vocab {
            Some(shard) => shard.gather_logits(&logits, &self.tp),
            None => Ok(logits),
        }
    }

    /// Embeddings `(B, T, C)` -> logits `(B, T, V)` (gathered over the group when
    /// vocab-parallel: for inspection; the loss never forms them).
    pub fn forward_embedded(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let logits = self.whole_logits(self.head(&self.hidden(x, fwd)?)?)?;
        Ok(logits.reshape((b, t, self.cfg.vocab_size))?)
    }

    pub fn forward(&self, idx: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        self.forward_embedded(&self.embed(idx, fwd)?, fwd)
    }

    /// `idx (B, T)` -> the logits `(B, V)` of each sequence's last position: the head runs
    /// on those rows only (what sampling needs).
    pub fn next_token_logits(&self, idx: &Tensor) -> Result<Tensor> {
        let fwd = Fwd::eval();
        let (b, t) = idx.dims2()?;
        let h = self.hidden(&self.embed(idx, &fwd)?, &fwd)?;
        let last = h.reshape((b, t, self.cfg.n_embd))?.narrow(1, t - 1, 1)?;
        self.whole_logits(self.head(&last.reshape((b, self.cfg.n_embd))?)?)
    }

    /// Mean cross-entropy over all `B x T` positions.
    pub fn loss_embedded(&self, x: &Tensor, targets: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let h = self.hidden(x, fwd)?;
        let targets = targets.flatten_all()?;
        match &self.vocab {
            Some(shard) => {
                shard.cross_entropy(self.cfg.kernels, &self.head(&h)?, &targets, &self.tp)
            }
            // The loss casts bf16 logits to f32 itself, as `head` would have, except on a
            // GPU, whose kernel reads them as they are (no 1.6 GB f32 copy for GPT-2).
            None => Ok(ops::cross_entropy(
                self.cfg.kernels,
                &self.head_in_compute_dtype(&h)?,
                &targets,
            )?),
        }
    }

    pub fn loss(&self, idx: &Tensor, targets: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        self.loss_embedded(&self.embed(idx, fwd)?, targets, fwd)
    }
}
