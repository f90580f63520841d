//! The replicated-activation invariant, checked. Every block's parameter tags and the
//! `f`/`g` operators at its edges assume that the stream between stages (and so the final
//! norm's input) is bit-identical on every rank of the TP group: a kind whose ranks keep
//! private channels past its stage would make every later block, the final norm, the head
//! and the loss compute something else, silently. A [`ReplicaProbe`] given to each rank's
//! stack ([`super::BlockStack::watch`]) records every stage's output; [`ReplicaProbe::verify`]
//! compares the ranks' records bit for bit once the ranks are done and names the first
//! stage that differs. Tests only: it copies every stage's output to the host.

use anyhow::Result;
use candle_core::{DType, Tensor};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A stage's label and its output's bits.
type StageBits = (String, Vec<u32>);

/// Each rank's stage outputs as bits, in the order its stack produced them.
#[derive(Default)]
pub struct ReplicaProbe {
    seen: Mutex<BTreeMap<usize, Vec<StageBits>>>,
}

impl ReplicaProbe {
    /// Records `t`, the output of the stage `label`, on `rank` (f32 holds a bf16 or f16
    /// stream exactly, so its bits compare as the stream's).
    pub fn record(&self, rank: usize, label: &str, t: &Tensor) -> Result<()> {
        let bits = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let bits = bits.into_iter().map(f32::to_bits).collect();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.entry(rank)
            .or_default()
            .push((label.to_string(), bits));
        Ok(())
    }

    /// How many stage outputs every rank recorded, if the ranks agree bit for bit; else the
    /// first stage (in the stack's order) whose output differs, named with the ranks and
    /// the first element that differ.
    pub fn verify(&self) -> std::result::Result<usize, String> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut ranks = seen.iter();
        let Some((&first_rank, first)) = ranks.next() else {
            return Err("no rank recorded a stage".into());
        };
        for (&rank, other) in ranks {
            if other.len() != first.len() {
                return Err(format!(
                    "rank {rank} recorded {} stage outputs, rank {first_rank} {}",
                    other.len(),
                    first.len()
                ));
            }
            for ((label, a), (_, b)) in first.iter().zip(other) {
                if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
                    let value = |v: &[u32]| v.get(i).map(|x| f32::from_bits(*x));
                    return Err(format!(
                        "{label} breaks the replicated-activation invariant: its output differs between rank {first_rank} and rank {rank} at element {i} ({:?} vs {:?}); a block's output must be the same on every rank (docs/architecture.md, \"Adding a block kind\")",
                        value(a),
                        value(b)
                    ));
                }
            }
        }
        Ok(first.len())
    }
}
