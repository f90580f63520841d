//! Gradient sums overlapped with backprop, as PyTorch's DistributedDataParallel and
//! Megatron's `overlap_grad_reduce` do them. Backprop finishes the gradients in about the
//! reverse order of their use; each gradient joins the open bucket the moment it is final
//! ([`candle_core::Tensor::backward_with`] says when), and a bucket that reaches
//! `ddp_bucket_mb` (the first one at 1 MiB, as PyTorch's `_DEFAULT_FIRST_BUCKET_BYTES`:
//! the last layers' gradients start moving early) is sealed and its sums started while
//! backprop goes on: first the TP sum
//! of its partial gradients (replicated parameters of `s`/`p` blocks), waited for when the
//! next bucket is sealed, then the data-parallel mean of the whole bucket. Everything is
//! waited for before the gradient norm.
//!
//! The same sums in the same order as the one bucket after backprop
//! ([`GradBuffer::sync_tp_partial`], then [`GradBuffer::average_dp`]): every backend sums
//! element by element in rank order, so how the elements are cut into buckets changes no
//! bit. Every rank of a group differentiates the same graph, so every rank seals the same
//! buckets in the same order.

use super::bucket_cap::BucketSealer;
use super::grads::GradBuffer;
use crate::comm::{CommKind, CountedComm, Reduce, Site, Started};
use crate::tp::ParamKind;
use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::Tensor;
use std::collections::VecDeque;

/// A sealed bucket's sums in flight.
struct Bucket {
    ids: Vec<usize>,
    /// The TP sum of its partial gradients (those ids), while it is started.
    tp_sum: Option<(Vec<usize>, Started<Tensor>)>,
    /// The data-parallel mean of all its gradients, once started.
    dp_mean: Option<Started<Tensor>>,
}

/// One step's buckets: filled as backprop finishes gradients, finished before the norm.
pub struct OverlappedSync {
    /// When the open bucket is sealed (the planner's rule too).
    sealer: BucketSealer,
    tp: CountedComm,
    dp: CountedComm,
    /// Final gradients no bucket holds yet, in the order they became final.
    open: Vec<usize>,
    in_bucket: Vec<bool>,
    in_flight: VecDeque<Bucket>,
}

impl OverlappedSync {
    /// Whether a step has anything to sum over its groups.
    pub fn needed(grads: &GradBuffer, tp: &CountedComm, dp: &CountedComm) -> bool {
        dp.communicates()
            || (tp.communicates()
                && (0..grads.len()).any(|i| grads.kind(i) == ParamKind::ReplicatedPartial))
    }

    pub fn new(grads: &GradBuffer, cap_bytes: usize, tp: &CountedComm, dp: &CountedComm) -> Self {
        Self {
            sealer: BucketSealer::new(cap_bytes),
            tp: tp.clone(),
            dp: dp.clone(),
            open: Vec::new(),
            in_bucket: vec![false; grads.len()],
            in_flight: VecDeque::new(),
        }
    }

    /// Parameter `i`'s gradient is final: it joins the open bucket, which is sealed and
    /// started once it holds `ddp_bucket_mb` (the first bucket 1 MiB).
    pub fn on_final(&mut self, i: usize, grads: &mut GradBuffer) -> Result<()> {
        if std::mem::replace(&mut self.in_bucket[i], true) {
            return Ok(());
        }
        self.open.push(i);
        if self.sealer.add(grads.bytes(i)) {
            self.seal(grads)?;
        }
        Ok(())
    }

    /// Seals the open bucket: the TP sums started a bucket ago are taken and their
    /// buckets' means started, then this bucket's TP sum is started (or, with none to
    /// wait for, its mean).
    fn seal(&mut self, grads: &mut GradBuffer) -> Result<()> {
        self.start_means(grads)?;
        let ids = std::mem::take(&mut self.open);
        let partial: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|&i| grads.kind(i) == ParamKind::ReplicatedPartial)
            .collect();
        let tp_sum = if self.tp.communicates() && !partial.is_empty() {
            let sum = self.tp.start(
                &grads.flatten(&partial)?,
                Reduce::Sum,
                Site::Params,
                CommKind::TpParamGrad,
            )?;
            Some((partial, sum))
        } else {
            None
        };
        let waits = tp_sum.is_some();
        self.in_flight.push_back(Bucket {
            ids,
            tp_sum,
            dp_mean: None,
        });
        if !waits {
            self.start_means(grads)?;
        }
        Ok(())
    }

    /// Takes every started TP sum into `grads` and starts the data-parallel means that
    /// waited for them, in bucket order.
    fn start_means(&mut self, grads: &mut GradBuffer) -> Result<()> {
        for bucket in self.in_flight.iter_mut() {
            if bucket.dp_mean.is_some() {
                continue;
            }
            if let Some((partial, sum)) = bucket.tp_sum.take() {
                grads.unflatten(&partial, &sum.wait()?)?;
            }
            if self.dp.communicates() {
                bucket.dp_mean = Some(self.dp.start(
                    &grads.flatten(&bucket.ids)?,
                    Reduce::Mean,
                    Site::Params,
                    CommKind::DpGrad,
                )?);
            }
        }
        Ok(())
    }

    /// Seals what is left (gradients backprop did not reach, in registry order, last),
    /// and waits for every sum, taking the results into `grads`.
    pub fn finish(mut self, grads: &mut GradBuffer) -> Result<()> {
        for i in 0..grads.len() {
            if !self.in_bucket[i] {
                self.in_bucket[i] = true;
                self.open.push(i);
            }
        }
        if !self.open.is_empty() {
            self.seal(grads)?;
        }
        self.start_means(grads)?;
        while let Some(bucket) = self.in_flight.pop_front() {
            if let Some(mean) = bucket.dp_mean {
                grads.unflatten(&bucket.ids, &mean.wait()?)?;
            }
        }
        Ok(())
    }
}

/// Backprop of `loss`, adding `scale` times each parameter's gradient into `grads` the
/// moment it is final, and handing it to `sync`'s buckets then (when given).
pub fn backward_into(
    loss: &Tensor,
    grads: &mut GradBuffer,
    scale: f32,
    mut sync: Option<&mut OverlappedSync>,
) -> Result<()> {
    let mut failed = None;
    let mut on_final = |var: &Tensor, store: &mut GradStore| -> Result<()> {
        let Some(i) = grads.index_of(var) else {
            return Ok(());
        };
        if let Some(g) = store.remove(var) {
            grads.add(i, &g, scale)?;
        }
        match sync.as_deref_mut() {
            Some(sync) => sync.on_final(i, grads),
            None => Ok(()),
        }
    };
    let done = loss.backward_with(|var, store| {
        on_final(var, store).map_err(|e| {
            // Kept whole (a user error stays one): candle's error only stops backprop.
            failed = Some(e);
            candle_core::Error::Msg("stopped by a gradient sum".into())
        })
    });
    match (failed, done) {
        (Some(e), _) => Err(e),
        (None, done) => done.map(drop).map_err(Into::into),
    }
}
