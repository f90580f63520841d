//! Text generation from a model: temperature and top-k sampling, identical on every rank
//! (same seed, and logits that are bit-identical across the TP group), so a sharded model
//! can generate with all ranks taking part in its collectives.

use crate::model::Gpt;
use crate::ops;
use anyhow::{bail, Result};
use candle_core::Tensor;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy)]
pub struct SampleOptions {
    pub tokens: usize,
    /// > 0; lower is more conservative.
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (`None`: all).
    pub top_k: Option<usize>,
    pub seed: u64,
}

/// Generates `opts.tokens` tokens after `prompt` (which must not be empty).
pub fn generate(model: &Gpt, prompt: &[u32], opts: &SampleOptions) -> Result<Vec<u32>> {
    generate_each(model, prompt, opts, &mut |_| {})
}

/// [`generate`], handing each token to `each` as soon as it is drawn (to print it).
pub fn generate_each(
    model: &Gpt,
    prompt: &[u32],
    opts: &SampleOptions,
    each: &mut dyn FnMut(u32),
) -> Result<Vec<u32>> {
    if prompt.is_empty() {
        bail!("generation needs at least one prompt token");
    }
    if opts.temperature <= 0.0 || !opts.temperature.is_finite() {
        bail!("temperature must be positive, got {}", opts.temperature);
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= model.cfg.vocab_size) {
        bail!(
            "prompt token {bad} is outside the model's vocabulary of {}",
            model.cfg.vocab_size
        );
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
    let mut ids = prompt.to_vec();
    let bs = model.cfg.block_size;
    for _ in 0..opts.tokens {
        let window = &ids[ids.len().saturating_sub(bs)..];
        let x = Tensor::from_vec(window.to_vec(), (1, window.len()), model.device())?;
        let mut last = model
            .next_token_logits(&x)?
            .detach()
            .flatten_all()?
            .to_vec1::<f32>()?;
        if let Some(k) = opts.top_k.filter(|&k| k > 0 && k < last.len()) {
            let mut sorted = last.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let cut = sorted[k - 1];
            for l in &mut last {
                if *l < cut {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let scaled = Tensor::from_vec(last, (1, model.cfg.vocab_size), model.device())?;
        let probs = ops::softmax_last_dim(&(scaled / opts.temperature)?)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let r: f32 = rng.random();
        let mut acc = 0f32;
        let mut pick = probs.iter().rposition(|&p| p > 0.0).unwrap_or(0);
        for (i, p) in probs.iter().enumerate() {
            acc += p;
            if r < acc {
                pick = i;
                break;
            }
        }
        ids.push(pick as u32);
        each(pick as u32);
    }
    Ok(ids[prompt.len()..].to_vec())
}

/// `s` and `p` blocks compute a different function at another tp; say so on stderr.
/// (`t` and `l` blocks are the same function at every tp.)
pub fn warn_if_other_function(layout: &crate::blocks::BlockLayout, trained_tp: usize, tp: usize) {
    if layout.depends_on_tp() && tp != trained_tp {
        eprintln!(
            "note: pattern {} has s/p blocks, which compute a different function at tp {tp} than at tp {trained_tp} (the checkpoint's); only t and l blocks are the same at every tp",
            layout.pattern
        );
    }
}
