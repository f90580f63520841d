//! How big the gradient buckets are whose sums start while backprop runs
//! (`ddp_bucket_mb`): sized for the model by default, or a fixed size in MiB as
//! PyTorch's `bucket_cap_mb`.
//!
//! Why not PyTorch's 25 MiB for every model: it is sized for large ones. GPT-2 124M's
//! 475 MiB of gradients make about 20 such buckets, but a small model's fit in one or
//! two, and the last bucket's sum can only start when backprop is over: mini at tp 1 x
//! dp 2 on a 1 Gbit/s link hid 30% of its gradient sums at 25 MiB against 58-67% with
//! 0.25-1 MiB buckets (docs/links.md).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const MIB: f64 = 1024.0 * 1024.0;

/// PyTorch DDP's `bucket_cap_mb` default, the largest bucket `auto` makes.
pub const PYTORCH_BUCKET_MB: f64 = 25.0;

/// `auto` cuts a rank's gradients into this many buckets where 25 MiB does not cut them
/// finer: enough that all but the last start while backprop still has most of its work
/// to do, few enough that a bucket's latency stays small beside its bytes.
pub const AUTO_BUCKETS: usize = 8;

/// `ddp_bucket_mb`: `auto` or a number of MiB.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum BucketCap {
    /// An eighth of a rank's gradient bytes, never above 25 MiB: mini's 3.1 MiB in
    /// buckets of 0.39 MiB, GPT-2 124M's in PyTorch's 25 MiB.
    #[default]
    Auto,
    /// Buckets of this many MiB.
    Mib(f64),
}

impl BucketCap {
    /// A bucket's size in bytes for a rank whose gradients take `grad_bytes`.
    pub fn bytes(self, grad_bytes: usize) -> usize {
        match self {
            BucketCap::Auto => {
                (grad_bytes / AUTO_BUCKETS).clamp(1, (PYTORCH_BUCKET_MB * MIB) as usize)
            }
            BucketCap::Mib(mb) => (mb * MIB) as usize,
        }
    }

    /// As configs write it: `auto`, or the MiB.
    pub fn label(self) -> String {
        match self {
            BucketCap::Auto => "auto".into(),
            BucketCap::Mib(mb) => format!("{mb}"),
        }
    }
}

/// PyTorch DDP's first bucket (`_DEFAULT_FIRST_BUCKET_BYTES`): small, so the gradients
/// backprop finishes first (the last layers') start their sums while most of backprop is
/// still to run.
pub const FIRST_BUCKET_BYTES: usize = 1024 * 1024;

/// When a bucket is sealed, the one rule training (`train/grad_buckets.rs`) and the
/// planner both follow: gradients join the open bucket as backprop finishes them, and it
/// is sealed once it holds a bucket's size (the first bucket at most
/// [`FIRST_BUCKET_BYTES`]).
#[derive(Debug, Clone)]
pub struct BucketSealer {
    cap_bytes: usize,
    sealed: usize,
    open_bytes: usize,
}

impl BucketSealer {
    pub fn new(cap_bytes: usize) -> Self {
        Self {
            cap_bytes,
            sealed: 0,
            open_bytes: 0,
        }
    }

    /// A gradient of `bytes` joins the open bucket: whether the bucket is sealed now
    /// (the next gradient opens another).
    pub fn add(&mut self, bytes: usize) -> bool {
        self.open_bytes += bytes;
        let cap = match self.sealed {
            0 => self.cap_bytes.min(FIRST_BUCKET_BYTES),
            _ => self.cap_bytes,
        };
        let seal = self.open_bytes >= cap;
        if seal {
            self.sealed += 1;
            self.open_bytes = 0;
        }
        seal
    }

    /// Whether the open bucket holds anything (backprop's end seals it).
    pub fn open(&self) -> bool {
        self.open_bytes > 0
    }
}

/// What a config may hold for it: a number, or a word.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Mib(f64),
    Word(String),
}

impl Serialize for BucketCap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BucketCap::Auto => s.serialize_str("auto"),
            BucketCap::Mib(mb) => s.serialize_f64(*mb),
        }
    }
}

impl<'de> Deserialize<'de> for BucketCap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Written::deserialize(d) {
            Ok(Written::Mib(mb)) => Ok(BucketCap::Mib(mb)),
            Ok(Written::Word(w)) if w == "auto" => Ok(BucketCap::Auto),
            Ok(Written::Word(w)) => Err(serde::de::Error::custom(format!(
                "ddp_bucket_mb is `auto` or a number of MiB, got `{w}`"
            ))),
            Err(_) => Err(serde::de::Error::custom(
                "ddp_bucket_mb is `auto` or a number of MiB",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` gives a small model eight buckets and a large one PyTorch's 25 MiB.
    #[test]
    fn auto_sizes_buckets_for_the_model_and_caps_them_at_pytorch_s_25_mib() {
        let mini = 804_096 * 4;
        assert_eq!(BucketCap::Auto.bytes(mini), mini / 8);
        let gpt2 = 124_439_808 * 4;
        assert_eq!(BucketCap::Auto.bytes(gpt2), 25 * 1024 * 1024);
        assert_eq!(BucketCap::Mib(0.25).bytes(mini), 262_144);
        assert_eq!(BucketCap::Auto.bytes(3), 1, "never an empty bucket");
    }
}
