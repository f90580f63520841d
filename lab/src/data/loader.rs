//! Loading prepared tokens and sampling batches.
//!
//! A step's windows are drawn from a stream keyed by (seed, split, step), never from
//! running RNG state: the step's global batch (`batch_size x accumulation x dp` windows)
//! is the same however it is split, each (micro-step, data-parallel rank) takes its own
//! contiguous slice, and resuming at a step needs nothing but the step number. So dp 2 x
//! batch 4, dp 1 x batch 8 and dp 1 x batch 4 x accumulation 2 see the same examples.

use super::prepare::Meta;
use super::tokenizer::Tokenizer;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;
use tp_harness::train::batches::{Batches, EvalSplit};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Split {
    Train,
    Val,
}

impl Split {
    /// `train` or `val`.
    pub fn label(self) -> &'static str {
        self.into()
    }
}

#[derive(Clone)]
pub struct Dataset {
    pub meta: Meta,
    pub train: Arc<Vec<u16>>,
    pub val: Arc<Vec<u16>>,
}

fn read_tokens(path: &Path) -> Result<Vec<u16>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() % 2 != 0 {
        bail!(
            "{} is truncated (odd byte count); delete the folder to prepare it again",
            path.display()
        );
    }
    Ok(bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect())
}

impl Dataset {
    pub fn load(dir: &Path) -> Result<Self> {
        let meta: Meta = serde_json::from_str(
            &std::fs::read_to_string(dir.join("meta.json"))
                .with_context(|| format!("cannot read {}/meta.json", dir.display()))?,
        )
        .with_context(|| {
            format!(
                "{}/meta.json is corrupt; delete the folder to prepare it again",
                dir.display()
            )
        })?;
        Ok(Self {
            train: Arc::new(read_tokens(&dir.join("train.bin"))?),
            val: Arc::new(read_tokens(&dir.join("val.bin"))?),
            meta,
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.meta.tokenizer
    }

    pub fn vocab_size(&self) -> usize {
        self.meta.tokenizer.vocab_size()
    }

    /// What the run trains on, as a SHA-256 of its prepared tokens and their tokenizer:
    /// equal for the same data however it was prepared, different for any edit of the
    /// corpus that changes a token. A run records it, so that a resume on other data is
    /// noticed (checkpoint meta, summary.json).
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(serde_json::to_vec(&self.meta.tokenizer).unwrap_or_default());
        for (name, tokens) in [("train", &self.train), ("val", &self.val)] {
            h.update(name.as_bytes());
            h.update((tokens.len() as u64).to_le_bytes());
            for chunk in tokens.chunks(1 << 16) {
                let bytes: Vec<u8> = chunk.iter().flat_map(|t| t.to_le_bytes()).collect();
                h.update(&bytes);
            }
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn split(&self, s: Split) -> &[u16] {
        match s {
            Split::Train => &self.train,
            Split::Val => &self.val,
        }
    }
}

/// Samples one data-parallel rank's share of each global batch.
pub struct Batcher<'a> {
    pub data: &'a Dataset,
    pub block_size: usize,
    /// Windows per rank per micro-step.
    pub batch_size: usize,
    pub accumulation: usize,
    pub dp: usize,
    pub dp_rank: usize,
    pub seed: u64,
    /// Where the batches go: the model's device.
    pub device: Device,
}

/// Keys for batches drawn outside training steps (evaluation rounds).
pub const EVAL_STREAM: u64 = 1 << 40;

impl Batcher<'_> {
    /// `(x, y)`, each `(batch_size, block_size)` u32, `y` shifted by one.
    pub fn batch(&self, split: Split, step: u64, micro: u64) -> Result<(Tensor, Tensor)> {
        let tokens = self.data.split(split);
        let t = self.block_size;
        if tokens.len() <= t + 1 {
            bail!(
                "the {:?} split has {} tokens, too few for block_size {t}",
                split,
                tokens.len()
            );
        }
        if micro as usize >= self.accumulation {
            bail!(
                "micro-step {micro} out of range for {} accumulation steps",
                self.accumulation
            );
        }
        let key = tp_harness::util::seeds::batch_key(self.seed, step, split as u64);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(key);
        let global = self.batch_size * self.accumulation * self.dp;
        let offsets: Vec<usize> = (0..global)
            .map(|_| rng.random_range(0..tokens.len() - t - 1))
            .collect();
        let start = (micro as usize * self.dp + self.dp_rank) * self.batch_size;
        let mine = &offsets[start..start + self.batch_size];
        let mut x = Vec::with_capacity(self.batch_size * t);
        let mut y = Vec::with_capacity(self.batch_size * t);
        for &o in mine {
            x.extend(tokens[o..o + t].iter().map(|&v| v as u32));
            y.extend(tokens[o + 1..o + t + 1].iter().map(|&v| v as u32));
        }
        Ok((
            Tensor::from_vec(x, (self.batch_size, t), &self.device)?,
            Tensor::from_vec(y, (self.batch_size, t), &self.device)?,
        ))
    }
}

/// The trainer's batches: a training step's micro-batches, and evaluation batches from
/// their own stream ([`EVAL_STREAM`]), one key per index.
impl Batches for Batcher<'_> {
    fn train_batch(&self, step: u64, micro: u64) -> Result<(Tensor, Tensor)> {
        self.batch(Split::Train, step, micro)
    }

    fn eval_batch(&self, split: EvalSplit, index: u64) -> Result<(Tensor, Tensor)> {
        let split = match split {
            EvalSplit::Train => Split::Train,
            EvalSplit::Val => Split::Val,
        };
        self.batch(split, EVAL_STREAM + index, 0)
    }
}
