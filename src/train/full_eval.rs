//! The exact loss of a model over a whole split: consecutive, non-overlapping windows of
//! `block` tokens, each predicting every next token, the shorter tail window included,
//! so every token after the first is predicted exactly once. Deterministic: the same
//! windows in the same batches every time, at any tp.

use crate::blocks::Fwd;
use crate::model::Gpt;
use anyhow::{bail, Result};
use candle_core::Tensor;

/// A split's mean cross-entropy and how many predictions it averages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitLoss {
    pub loss: f64,
    pub tokens: usize,
}

/// `(start, len)` of the windows over `n` tokens: inputs `start..start+len`, targets one
/// further; all `len == block` but the last.
pub fn windows(n: usize, block: usize) -> Vec<(usize, usize)> {
    let predicted = n.saturating_sub(1);
    (0..predicted)
        .step_by(block.max(1))
        .map(|s| (s, block.min(predicted - s)))
        .collect()
}

/// The model's mean loss over every window of `tokens`, `batch` full windows a pass (the
/// tail in a pass of its own). Every rank of a TP group calls it and gets the same value.
pub fn split_loss(model: &Gpt, tokens: &[u16], block: usize, batch: usize) -> Result<SplitLoss> {
    if tokens.len() < 2 {
        bail!(
            "a split of {} token(s) has nothing to predict",
            tokens.len()
        );
    }
    let dev = model.device();
    let wins = windows(tokens.len(), block);
    let (full, tail): (Vec<_>, Vec<_>) = wins.iter().partition(|&&(_, len)| len == block);
    let mut groups: Vec<Vec<(usize, usize)>> =
        full.chunks(batch.max(1)).map(|c| c.to_vec()).collect();
    groups.extend(tail.into_iter().map(|w| vec![w]));
    let (mut sum, mut count) = (0f64, 0usize);
    for g in groups {
        let len = g[0].1;
        let mut x = Vec::with_capacity(g.len() * len);
        let mut y = Vec::with_capacity(g.len() * len);
        for &(s, _) in &g {
            x.extend(tokens[s..s + len].iter().map(|&t| t as u32));
            y.extend(tokens[s + 1..s + len + 1].iter().map(|&t| t as u32));
        }
        let x = Tensor::from_vec(x, (g.len(), len), dev)?;
        let y = Tensor::from_vec(y, (g.len(), len), dev)?;
        let mean = model.loss(&x, &y, &Fwd::eval())?.to_scalar::<f32>()? as f64;
        sum += mean * (g.len() * len) as f64;
        count += g.len() * len;
    }
    Ok(SplitLoss {
        loss: sum / count as f64,
        tokens: count,
    })
}

#[cfg(test)]
mod tests {
    use super::windows;

    #[test]
    fn windows_predict_every_token_after_the_first_exactly_once() {
        for (n, block) in [(10, 3), (10, 9), (10, 10), (2, 64), (1000, 64), (65, 64)] {
            let w = windows(n, block);
            let mut predicted = vec![0u32; n];
            for &(s, len) in &w {
                assert!(
                    len >= 1 && len <= block && s + len < n,
                    "{n} {block}: {s}+{len}"
                );
                predicted[s + 1..=s + len].iter_mut().for_each(|c| *c += 1);
            }
            assert_eq!(predicted[0], 0);
            assert!(
                predicted[1..].iter().all(|&c| c == 1),
                "{n} {block}: {predicted:?}"
            );
            assert!(w[..w.len() - 1].iter().all(|&(_, len)| len == block));
        }
        assert!(windows(1, 8).is_empty());
    }
}
