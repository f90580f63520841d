//! Megatron-LM's vocabulary-parallel embedding and cross-entropy (`VocabParallelEmbedding`
//! and `vocab_parallel_cross_entropy` in `tensor_parallel/`), for a table tied between
//! the lookup and the output projection.
//!
//! Rank r of N owns rows `[r*ceil(V/N), (r+1)*ceil(V/N))` of the `(V, C)` table (the
//! vocabulary padded to a multiple of N; padding rows are never stored, so never
//! predicted). Nothing of size `V` is ever formed on a rank during training:
//!
//! - lookup: each rank looks up the ids it owns, zeros the others, and the group sums
//!   (`g`: forward all-reduce of `(R, C)`, backward identity);
//! - head: `f` on the replicated input (backward all-reduce of its gradient), then the
//!   rank's logit slice `x W_r^T`, `(R, V/N)`;
//! - loss: the row maxima (max all-reduce), then the sums of `exp(l - max)` and the
//!   target's shifted logit (only its owner's is non-zero) in one sum all-reduce of
//!   `(R, 2)`; `loss = log(sum) - target` per row. Its gradient is local: autograd through
//!   `g`'s identity backward gives each rank `softmax - onehot` on its own slice.

use super::mappings::{copy_to_tp, reduce_from_tp};
use super::shard::padded_rows_range;
use crate::comm::counted::{CountedComm, Reduce};
use crate::comm::tally::{CommKind, Site};
use crate::ops::{self, Kernels};
use anyhow::{bail, Result};
use candle_core::{DType, Tensor};
use std::ops::Range;

/// One rank's rows of a vocabulary-parallel table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VocabShard {
    /// The ids this rank owns.
    pub rows: Range<usize>,
    /// The whole vocabulary.
    pub vocab: usize,
}

impl VocabShard {
    /// Rank `rank`'s rows of a `vocab`-row table split over `size` ranks; an error when
    /// the split leaves a rank with none.
    pub fn new(vocab: usize, rank: usize, size: usize) -> Result<Self> {
        let rows = padded_rows_range(vocab, rank, size);
        if rows.is_empty() {
            bail!(
                "vocab_parallel: a vocabulary of {vocab} tokens leaves rank {rank} of tp {size} no rows; use a smaller tp or turn vocab_parallel off"
            );
        }
        Ok(Self { rows, vocab })
    }

    /// Each id of `ids` as a row of this shard, `None` where another rank owns it.
    fn owned(&self, ids: &Tensor) -> Result<Vec<Option<u32>>> {
        let ids = ids.flatten_all()?.to_dtype(DType::U32)?.to_vec1::<u32>()?;
        ids.iter()
            .map(|&id| {
                let id = id as usize;
                if id >= self.vocab {
                    bail!("token id {id} is outside the vocabulary of {}", self.vocab);
                }
                Ok(self
                    .rows
                    .contains(&id)
                    .then_some((id - self.rows.start) as u32))
            })
            .collect()
    }

    /// Rows of the table for `ids` (any shape): `(ids.elem_count(), C)`, summed over the
    /// group so every rank holds every row. `table` is this rank's `(rows, C)` shard.
    pub fn embed(&self, table: &Tensor, ids: &Tensor, tp: &CountedComm) -> Result<Tensor> {
        let owned = self.owned(ids)?;
        let n = owned.len();
        let local: Vec<u32> = owned.iter().map(|o| o.unwrap_or(0)).collect();
        let mask: Vec<f32> = owned
            .iter()
            .map(|o| f32::from(u8::from(o.is_some())))
            .collect();
        let local = Tensor::from_vec(local, n, table.device())?;
        let mask = Tensor::from_vec(mask, (n, 1), table.device())?;
        let rows = table
            .index_select(&local, 0)?
            .broadcast_mul(&mask.to_dtype(table.dtype())?)?;
        Ok(reduce_from_tp(&rows, tp, Site::Embedding)?)
    }

    /// This rank's logit slice `(R, rows)` of a replicated `x (R, C)` against its shard
    /// of the tied table.
    pub fn logits(
        &self,
        k: Kernels,
        x: &Tensor,
        table: &Tensor,
        tp: &CountedComm,
    ) -> Result<Tensor> {
        let x = copy_to_tp(x, tp, Site::Head)?;
        Ok(ops::linear_t(k, &x, table, None)?)
    }

    /// Every rank's logit slices side by side, `(R, vocab)`, on every rank (an all-gather
    /// built from the sum: for sampling and inspection, never for the loss).
    pub fn gather_logits(&self, local: &Tensor, tp: &CountedComm) -> Result<Tensor> {
        let r = local.dim(0)?;
        let placed = Tensor::zeros((r, self.vocab), local.dtype(), local.device())?
            .slice_assign(&[0..r, self.rows.clone()], &local.contiguous()?)?;
        tp.all_reduce(
            &placed.detach(),
            Reduce::Sum,
            Site::Head,
            CommKind::TpForward,
        )
    }

    /// Mean cross-entropy over the `R` rows of the logits whose slices the ranks hold
    /// (`local (R, rows)`), against `targets (R)`, without gathering the logits.
    pub fn cross_entropy(
        &self,
        k: Kernels,
        local: &Tensor,
        targets: &Tensor,
        tp: &CountedComm,
    ) -> Result<Tensor> {
        let r = local.dim(0)?;
        if targets.elem_count() != r {
            bail!("{} targets for {r} rows of logits", targets.elem_count());
        }
        let max = tp.all_reduce(
            &ops::row_max(k, local)?,
            Reduce::Max,
            Site::Head,
            CommKind::TpForward,
        )?;
        let stats = ops::shard_softmax_stats(k, local, &max, &self.owned(targets)?)?;
        let both = reduce_from_tp(&stats, tp, Site::Head)?;
        let per_row = (both.narrow(1, 0, 1)?.log()? - both.narrow(1, 1, 1)?)?;
        Ok(per_row.mean_all()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    use crate::comm::test_ranks::on_thread_ranks as on_ranks;

    fn logits(r: usize, v: usize) -> Tensor {
        let vals: Vec<f32> = (0..r * v)
            .map(|i| ((i as f32) * 0.77).sin() * 4.0)
            .collect();
        Tensor::from_vec(vals, (r, v), &Device::Cpu).unwrap()
    }

    /// 7 tokens over 3 ranks (3, 3, 1 rows): the parallel loss and each rank's slice of
    /// its gradient equal the gathered cross-entropy's.
    #[test]
    fn parallel_cross_entropy_equals_the_whole_one_in_value_and_gradient() {
        for k in [Kernels::Fused, Kernels::Portable] {
            parallel_cross_entropy_on(k);
        }
    }

    fn parallel_cross_entropy_on(k: Kernels) {
        let (r, v) = (5, 7);
        let full = logits(r, v);
        let targets = Tensor::new(&[0u32, 6, 3, 2, 6], &Device::Cpu).unwrap();
        let whole = Var::from_tensor(&full).unwrap();
        let want = ops::cross_entropy_composed(whole.as_tensor(), &targets).unwrap();
        let want_grad = want
            .backward()
            .unwrap()
            .get(whole.as_tensor())
            .unwrap()
            .clone();
        let want = want.to_scalar::<f32>().unwrap();
        let got = on_ranks(3, |tp| {
            let shard = VocabShard::new(v, tp.rank(), 3).unwrap();
            let mine =
                Var::from_tensor(&full.narrow(1, shard.rows.start, shard.rows.len()).unwrap())
                    .unwrap();
            let loss = shard
                .cross_entropy(k, mine.as_tensor(), &targets, &tp)
                .unwrap();
            let g = loss
                .backward()
                .unwrap()
                .get(mine.as_tensor())
                .unwrap()
                .clone();
            let want_g = want_grad
                .narrow(1, shard.rows.start, shard.rows.len())
                .unwrap();
            let diff = (g - want_g)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            (loss.to_scalar::<f32>().unwrap(), diff)
        });
        for (loss, diff) in got {
            assert!((loss - want).abs() < 1e-6, "{loss} vs {want}");
            assert!(diff < 1e-7, "gradient differs by {diff}");
        }
    }

    /// The lookup returns the table's rows whoever owns them, and the gathered logits
    /// are the whole product.
    #[test]
    fn lookup_and_gathered_logits_equal_the_replicated_ones() {
        let (v, c) = (7, 3);
        let table = logits(v, c);
        let ids = Tensor::new(&[[5u32, 0], [2, 3]], &Device::Cpu).unwrap();
        let x = logits(2, c);
        let want_rows = table.index_select(&ids.flatten_all().unwrap(), 0).unwrap();
        let want_logits = x.matmul(&table.t().unwrap()).unwrap();
        let got = on_ranks(4, |tp| {
            let shard = VocabShard::new(v, tp.rank(), 4).unwrap();
            let mine = table.narrow(0, shard.rows.start, shard.rows.len()).unwrap();
            let rows = shard.embed(&mine, &ids, &tp).unwrap();
            let local = shard.logits(Kernels::Portable, &x, &mine, &tp).unwrap();
            (rows, shard.gather_logits(&local, &tp).unwrap())
        });
        for (rows, all) in got {
            assert_eq!(
                rows.to_vec2::<f32>().unwrap(),
                want_rows.to_vec2::<f32>().unwrap()
            );
            let d = (all - &want_logits)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap();
            assert!(d.to_scalar::<f32>().unwrap() < 1e-6);
        }
    }

    #[test]
    fn a_split_that_leaves_a_rank_no_rows_is_an_error_naming_the_fix() {
        let e = VocabShard::new(3, 3, 4).unwrap_err().to_string();
        assert!(e.contains("smaller tp"), "{e}");
    }
}
