//! `tp-scan`: the block-wise sensitivity scan of SPD (Kim et al., ICML 2025) on a trained
//! checkpoint, zero-shot. Each `t` block in turn, from the last down, is evaluated as an
//! `s` (or `p`) block with every other block unchanged — how much the whole validation
//! split's loss rises is that block's sensitivity — and the blocks are also converted
//! cumulatively from the last down, as the paper drops syncs. Blocks are tiered by the
//! relative rise, and for each budget of forward all-reduces per pass the scan
//! recommends converting the least sensitive blocks (each recommendation evaluated too;
//! converting to p, also mixes with s for the budgets in between).
//!
//! `--to l` is the Ladder Residual paper's recipe in the same shape (convert the top
//! blocks of a trained model, then fine-tune): an `l` block keeps its all-reduces but
//! overlaps them, so the budget is the all-reduces a rank waits for
//! ([`BlockLayout::exposed_allreduces`]), which for s and p equals the forward count.

pub mod plot;

use crate::data::Split;
use crate::launch::job::load_dataset;
use crate::launch::threads::{configure_threads, on_tp_threads};
use crate::run_dir::records::{ScanBlock, ScanReport, ScanStep, Tier};
use anyhow::Result;
use candle_core::Tensor;
use std::collections::HashMap;
use tp_harness::blocks::{BlockKind, BlockLayout};
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_harness::train::full_eval::split_loss;

/// Full-split val loss of `weights` under `pattern` on `tp` thread ranks.
fn loss_of(
    cfg: &crate::config::RunConfig,
    data: &crate::data::Dataset,
    weights: &HashMap<String, Tensor>,
    pattern: &str,
    tp: usize,
) -> Result<f64> {
    let mut mcfg = cfg.model_config(data.vocab_size())?;
    mcfg.kernels = cfg.parallel.kernels;
    let layout = BlockLayout::parse(pattern).map_err(tp_harness::error::user)?;
    let tokens = data.split(Split::Val);
    let l = on_tp_threads(tp, |comm| {
        let source = StoredParams {
            tensors: weights.clone(),
        };
        let model = Gpt::build_on(&mcfg, &layout, &source, &comm, &candle_core::Device::Cpu)?;
        split_loss(&model, tokens, mcfg.block_size, cfg.optim.batch_size)
    })?;
    Ok(l[0].loss)
}

fn with_block(pattern: &str, i: usize, kind: BlockKind) -> String {
    pattern
        .chars()
        .enumerate()
        .map(|(j, c)| if j == i { kind.letter() } else { c })
        .collect()
}

/// Runs the scan on a run's latest checkpoint (or `checkpoint`), converting `t` blocks
/// to `to` (`s` or `p`) at `tp` ranks (default: the run's; at least 2, where s and p
/// differ from t).
pub fn scan_run(
    run_dir: &std::path::Path,
    checkpoint: Option<&std::path::Path>,
    to: BlockKind,
    tp: Option<usize>,
) -> Result<ScanReport> {
    let (cfg, ck) = crate::run_dir::load_checkpoint(
        run_dir,
        checkpoint,
        "scan",
        crate::run_dir::Need::Weights,
    )?;
    let tp = tp.unwrap_or(cfg.parallel.tp);
    if tp < 2 {
        tp_harness::user_bail!(
            "tp-scan at tp {tp}: s, p and l blocks equal t blocks on one rank, so there is nothing to measure: use --tp 2 or more"
        );
    }
    if to == BlockKind::T {
        tp_harness::user_bail!("--to t: convert blocks to s, p or l");
    }
    let data = load_dataset(&cfg)?;
    cfg.model_config(data.vocab_size())?
        .check(tp)
        .map_err(tp_harness::error::user)?;
    configure_threads(tp);
    let base_pattern = cfg.layout().expanded();
    // The t blocks, from the last down.
    let candidates: Vec<usize> = base_pattern
        .char_indices()
        .filter(|&(_, c)| c == 't')
        .map(|(i, _)| i)
        .rev()
        .collect();
    if candidates.is_empty() {
        tp_harness::user_bail!(
            "pattern {base_pattern} has no t block to convert: scan a run with t blocks"
        );
    }
    let scan = Scanner {
        cfg: &cfg,
        data: &data,
        weights: &ck.weights,
        tp,
        to,
        base_pattern: &base_pattern,
    };
    let base = scan.loss(&base_pattern)?;
    let blocks = scan.single_blocks(&candidates, base)?;
    let cumulative = scan.cumulative(&candidates)?;
    let mut recommended = scan.least_sensitive_first(&blocks)?;
    if to == BlockKind::P {
        scan.mixes_with_s(&blocks, &mut recommended)?;
    }
    drop_dominated(&mut recommended);
    Ok(ScanReport {
        checkpoint: ck.dir.display().to_string(),
        step: ck.meta.step,
        tp,
        to,
        base_pattern: base_pattern.clone(),
        base_forward_allreduces: forward_allreduces(&base_pattern)?.0,
        base_exposed_allreduces: forward_allreduces(&base_pattern)?.1,
        base_loss: base,
        val_tokens: data.split(Split::Val).len().saturating_sub(1),
        blocks,
        cumulative,
        recommended,
    })
}

/// A pattern's forward all-reduces per pass, and of those the exposed ones.
fn forward_allreduces(pattern: &str) -> Result<(usize, usize)> {
    let layout = BlockLayout::parse(pattern).map_err(tp_harness::error::user)?;
    Ok((layout.forward_allreduces(), layout.exposed_allreduces()))
}

/// One checkpoint's weights, evaluated under other patterns.
struct Scanner<'a> {
    cfg: &'a crate::config::RunConfig,
    data: &'a crate::data::Dataset,
    weights: &'a HashMap<String, Tensor>,
    tp: usize,
    to: BlockKind,
    base_pattern: &'a str,
}

impl Scanner<'_> {
    fn loss(&self, pattern: &str) -> Result<f64> {
        loss_of(self.cfg, self.data, self.weights, pattern, self.tp)
    }

    fn step(&self, pattern: String) -> Result<ScanStep> {
        let (forward, exposed) = forward_allreduces(&pattern)?;
        Ok(ScanStep {
            forward_allreduces: forward,
            exposed_allreduces: exposed,
            loss: self.loss(&pattern)?,
            pattern,
        })
    }

    /// Each t block converted alone.
    fn single_blocks(&self, candidates: &[usize], base: f64) -> Result<Vec<ScanBlock>> {
        candidates
            .iter()
            .map(|&i| {
                let pattern = with_block(self.base_pattern, i, self.to);
                let loss = self.loss(&pattern)?;
                Ok(ScanBlock {
                    block: i,
                    pattern,
                    loss,
                    rise: loss - base,
                    tier: Tier::of(loss - base, base),
                })
            })
            .collect()
    }

    /// As the paper drops syncs: the last block, then the last two, and so on.
    fn cumulative(&self, candidates: &[usize]) -> Result<Vec<ScanStep>> {
        let mut pattern = self.base_pattern.to_string();
        candidates
            .iter()
            .map(|&i| {
                pattern = with_block(&pattern, i, self.to);
                self.step(pattern.clone())
            })
            .collect()
    }

    /// For each budget: the least sensitive blocks converted until the pattern fits.
    fn least_sensitive_first(&self, blocks: &[ScanBlock]) -> Result<Vec<ScanStep>> {
        let mut order: Vec<&ScanBlock> = blocks.iter().collect();
        order.sort_by(|a, b| a.rise.total_cmp(&b.rise));
        let mut recommended: Vec<ScanStep> = Vec::new();
        let mut pattern = self.base_pattern.to_string();
        for b in order {
            pattern = with_block(&pattern, b.block, self.to);
            let n = forward_allreduces(&pattern)?.1;
            if recommended
                .last()
                .is_some_and(|r| r.exposed_allreduces <= n)
            {
                continue;
            }
            recommended.push(self.step(pattern.clone())?);
        }
        Ok(recommended)
    }

    /// Converting to p, budgets between the p-only ones come from s: the k least
    /// sensitive blocks as p and the other t blocks as s (tttt -> sppp for 2
    /// all-reduces), kept where they reach a budget the p-only list does not, or reach
    /// one at a lower loss.
    fn mixes_with_s(&self, blocks: &[ScanBlock], recommended: &mut Vec<ScanStep>) -> Result<()> {
        let mut by_rise: Vec<&ScanBlock> = blocks.iter().collect();
        by_rise.sort_by(|a, b| a.rise.total_cmp(&b.rise));
        for k in 1..by_rise.len() {
            let mut p: Vec<char> = self.base_pattern.chars().collect();
            for (rank, b) in by_rise.iter().enumerate() {
                p[b.block] = if rank < k { 'p' } else { 's' };
            }
            let mix = self.step(p.into_iter().collect())?;
            match recommended
                .iter()
                .position(|r| r.exposed_allreduces == mix.exposed_allreduces)
            {
                Some(at) if recommended[at].loss <= mix.loss => {}
                Some(at) => recommended[at] = mix,
                None => recommended.push(mix),
            }
        }
        Ok(())
    }
}

/// Most exposed all-reduces first; a recommendation no better than one with fewer is
/// dropped (it would never be the pattern to pick).
fn drop_dominated(recommended: &mut Vec<ScanStep>) {
    recommended.sort_by_key(|r| std::cmp::Reverse(r.exposed_allreduces));
    let mut best_below = f64::INFINITY;
    for r in recommended.iter_mut().rev() {
        if r.loss >= best_below {
            r.exposed_allreduces = usize::MAX;
        } else {
            best_below = r.loss;
        }
    }
    recommended.retain(|r| r.exposed_allreduces != usize::MAX);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_split_at_one_and_five_percent_and_blocks_are_replaced_by_index() {
        assert_eq!(Tier::of(0.009, 1.0), Tier::Insensitive);
        assert_eq!(Tier::of(0.03, 1.0), Tier::Sensitive);
        assert_eq!(Tier::of(0.06, 1.0), Tier::ExtremelySensitive);
        for t in [Tier::Insensitive, Tier::Sensitive, Tier::ExtremelySensitive] {
            assert_eq!(serde_json::to_value(t).unwrap(), t.label());
        }
        assert_eq!(Tier::ExtremelySensitive.label(), "extremely sensitive");
        assert_eq!(with_block("tttt", 3, BlockKind::S), "ttts");
        assert_eq!(with_block("tstt", 0, BlockKind::P), "pstt");
    }
}
