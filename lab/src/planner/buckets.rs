//! The gradient buckets a step seals, by the rule training seals them with
//! (`BucketSealer`, the engine's `train/bucket_cap.rs`): each gradient joins the open
//! bucket when backprop finishes it, and a bucket that reaches its size (the first at
//! most 1 MiB) is sealed. Backprop finishes gradients in about the
//! reverse order of their use — the final norm, the layers from the last, each from its
//! MLP's output back to its first norm, then the position and token embeddings (the
//! tied token embedding last: the head used it too) — so the planner walks them in that
//! order ([`super::request::Request::buckets`]). Candle's exact order can put a gradient
//! one bucket over, hence "about".

use tp_harness::train::bucket_cap::{BucketCap, BucketSealer};

/// One gradient in backprop's order: its bytes on a rank, and whether each TP rank holds
/// only its part of it (summed over the TP group with its bucket).
pub type Grad = (f64, bool);

/// What the step's buckets hold: their count, and how many hold a partial gradient (a
/// TP sum each).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Buckets {
    pub count: f64,
    pub with_partial: f64,
}

/// The buckets a rank seals from `grads`, given in the order backprop finishes them.
pub fn seal(grads: Vec<Grad>, bucket_mb: BucketCap) -> Buckets {
    let total: f64 = grads.iter().map(|g| g.0).sum();
    let mut sealer = BucketSealer::new(bucket_mb.bytes(total as usize));
    let (mut count, mut with_partial) = (0.0, 0.0);
    let mut open_partial = false;
    for (bytes, partial) in grads {
        open_partial |= partial;
        if sealer.add(bytes.round() as usize) {
            count += 1.0;
            with_partial += f64::from(u8::from(open_partial));
            open_partial = false;
        }
    }
    if sealer.open() {
        count += 1.0;
        with_partial += f64::from(u8::from(open_partial));
    }
    Buckets {
        count,
        with_partial,
    }
}
