//! The communication tally: every collective is recorded per site (a layer, or the
//! parameter buckets) and per kind, with calls, bytes and seconds.
//!
//! Training passes and evaluation/sampling passes are kept apart: the per-pass counts that
//! blocks.md's formula predicts are about training steps, so [`Tally::enter`] routes
//! evaluation traffic into its own totals.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// Named once: serde's name is strum's (`tp-forward`), the list is strum's iterator.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CommKind {
    /// Activation all-reduce in a forward pass (the `g` operator).
    TpForward,
    /// Input-gradient all-reduce in a backward pass (the `f` operator).
    TpBackward,
    /// Once-per-step sum of partial gradients of replicated parameters.
    TpParamGrad,
    /// Data-parallel gradient average.
    DpGrad,
    /// Scalars: losses, gradient norms.
    Other,
}

impl CommKind {
    /// Every kind, in declaration order.
    pub fn all() -> impl Iterator<Item = CommKind> {
        <CommKind as strum::IntoEnumIterator>::iter()
    }
    /// Its name in comm.json and every table (serde's).
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// Where a collective was issued: a transformer layer, or outside the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    /// The vocabulary-parallel embedding lookup.
    Embedding,
    Layer(usize),
    /// The vocabulary-parallel head and its cross-entropy.
    Head,
    Params,
    Misc,
}

impl Site {
    /// `embedding`, `layer.N`, `head`, `params` or `misc`.
    pub fn label(self) -> String {
        match self {
            Site::Embedding => "embedding".into(),
            Site::Layer(i) => format!("layer.{i}"),
            Site::Head => "head".into(),
            Site::Params => "params".into(),
            Site::Misc => "misc".into(),
        }
    }

    pub fn from_label(s: &str) -> Option<Self> {
        Some(match s {
            "embedding" => Site::Embedding,
            "head" => Site::Head,
            "params" => Site::Params,
            "misc" => Site::Misc,
            _ => Site::Layer(s.strip_prefix("layer.")?.parse().ok()?),
        })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub calls: u64,
    pub bytes: u64,
    /// Measured wall-clock seconds the rank spent on these calls (including any emulated
    /// link delay): blocked in them, plus what it computed through started ones.
    pub seconds: f64,
    /// Seconds the emulated link model charges for these calls (0 without emulation).
    pub modelled_seconds: f64,
    /// Of `seconds`, the part the rank computed through: from each started collective's
    /// start to its wait (or to the emulated link's end of it), less the time blocked in
    /// other collectives meanwhile, each moment counted for one collective of a group
    /// only (buckets in flight together hide the same work once); 0 for blocking calls.
    #[serde(default)]
    pub hidden_seconds: f64,
    /// Members of the group the calls ran over (the largest, if several).
    pub group_size: usize,
}

impl Stat {
    fn add(&mut self, c: &Call) {
        self.calls += 1;
        self.bytes += c.bytes;
        self.seconds += c.seconds;
        self.modelled_seconds += c.modelled_seconds;
        self.hidden_seconds += c.hidden_seconds;
        self.group_size = self.group_size.max(c.group_size);
    }
    pub fn merge(&mut self, other: &Stat) {
        self.calls += other.calls;
        self.bytes += other.bytes;
        self.seconds += other.seconds;
        self.modelled_seconds += other.modelled_seconds;
        self.hidden_seconds += other.hidden_seconds;
        self.group_size = self.group_size.max(other.group_size);
    }
}

/// One collective as recorded.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub bytes: u64,
    /// From its start to its result.
    pub seconds: f64,
    pub modelled_seconds: f64,
    /// Of `seconds`, the part before the rank waited for it.
    pub hidden_seconds: f64,
    pub group_size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Train,
    Eval,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SnapshotRecord", into = "SnapshotRecord")]
pub struct TallySnapshot {
    /// Training traffic per (site, kind).
    pub train: BTreeMap<(Site, CommKind), Stat>,
    /// Evaluation and sampling traffic per kind.
    pub eval: BTreeMap<CommKind, Stat>,
}

impl TallySnapshot {
    pub fn total(&self, kind: CommKind) -> Stat {
        let mut s = Stat::default();
        for ((_, k), v) in &self.train {
            if *k == kind {
                s.merge(v);
            }
        }
        s
    }
    pub fn at(&self, site: Site, kind: CommKind) -> Stat {
        self.train.get(&(site, kind)).copied().unwrap_or_default()
    }
}

/// A snapshot as stored (in checkpoints): JSON maps need string keys, so the training
/// traffic is a list of (site, kind, stat).
#[derive(Serialize, Deserialize)]
struct SnapshotRecord {
    train: Vec<SiteRecord>,
    eval: BTreeMap<CommKind, Stat>,
}

#[derive(Serialize, Deserialize)]
struct SiteRecord {
    site: String,
    kind: CommKind,
    stat: Stat,
}

impl From<TallySnapshot> for SnapshotRecord {
    fn from(s: TallySnapshot) -> Self {
        Self {
            train: s
                .train
                .into_iter()
                .map(|((site, kind), stat)| SiteRecord {
                    site: site.label(),
                    kind,
                    stat,
                })
                .collect(),
            eval: s.eval,
        }
    }
}

impl TryFrom<SnapshotRecord> for TallySnapshot {
    type Error = String;
    fn try_from(r: SnapshotRecord) -> Result<Self, String> {
        let mut train = BTreeMap::new();
        for e in r.train {
            let site =
                Site::from_label(&e.site).ok_or_else(|| format!("unknown site `{}`", e.site))?;
            train.insert((site, e.kind), e.stat);
        }
        Ok(Self {
            train,
            eval: r.eval,
        })
    }
}

struct Inner {
    phase: Phase,
    snap: TallySnapshot,
}

/// How many blocked intervals a tally keeps: more than the collectives of a step of the
/// deepest layouts (a window never spans more than one step).
const BLOCKED_KEPT: usize = 8192;

/// One rank's tally. Cheap to record into; shared by every counted group of the rank.
/// Restores the tally's phase when dropped ([`Tally::enter`]).
#[must_use = "the phase is restored when the guard is dropped"]
pub struct PhaseGuard<'a> {
    tally: &'a Tally,
    before: Phase,
}

impl Drop for PhaseGuard<'_> {
    fn drop(&mut self) {
        self.tally.lock().phase = self.before;
    }
}

pub struct Tally {
    inner: Mutex<Inner>,
    /// Nanoseconds this rank has spent blocked in collectives (blocking calls and waits
    /// for started ones), all groups together: what a started all-reduce's window did
    /// not compute.
    blocked_ns: std::sync::atomic::AtomicU64,
    /// The latest intervals the rank was blocked in, oldest first (at most
    /// [`BLOCKED_KEPT`]): a started collective's hidden time is its window less the parts
    /// of these inside it, not less all blocked time since its start (which would take
    /// off waits after its window ended).
    blocked_at: Mutex<std::collections::VecDeque<(Instant, Instant)>>,
    /// The rank's timeline while a traced step runs (`trace: true`).
    trace: crate::util::trace::Trace,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                phase: Phase::Train,
                snap: TallySnapshot::default(),
            }),
            blocked_ns: std::sync::atomic::AtomicU64::new(0),
            blocked_at: Default::default(),
            trace: Default::default(),
        }
    }
}

impl Tally {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the interval `from..to` the rank spent blocked in a collective.
    pub fn add_blocked(&self, from: Instant, to: Instant) {
        let ns = u64::try_from((to - from).as_nanos()).unwrap_or(u64::MAX);
        self.blocked_ns
            .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
        let mut at = self.blocked_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.len() == BLOCKED_KEPT {
            at.pop_front();
        }
        at.push_back((from, to));
    }

    /// How long the rank was blocked in collectives within `from..to`.
    pub fn blocked_within(&self, from: Instant, to: Instant) -> std::time::Duration {
        let at = self.blocked_at.lock().unwrap_or_else(|p| p.into_inner());
        // Each interval is pushed when it ends, so the ends grow along the queue: walk back
        // from the newest and stop at the first that ended before the window (a step's
        // few, not all the kept ones, on every collective's finish).
        at.iter()
            .rev()
            .take_while(|&&(_, b)| b >= from)
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// Time the rank has spent blocked in collectives so far.
    pub fn blocked(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.blocked_ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub fn trace(&self) -> &crate::util::trace::Trace {
        &self.trace
    }

    /// Training or evaluation, as collectives are recorded now.
    pub fn phase(&self) -> Phase {
        self.lock().phase
    }

    /// Records collectives as `phase` until the guard is dropped, then as before — on
    /// every path out, errors and panics included (evaluation, sampling and checkpoints
    /// enter [`Phase::Eval`] through it; nothing sets the phase by hand).
    pub fn enter(&self, phase: Phase) -> PhaseGuard<'_> {
        let before = std::mem::replace(&mut self.lock().phase, phase);
        PhaseGuard {
            tally: self,
            before,
        }
    }

    pub fn record(&self, site: Site, kind: CommKind, call: Call) {
        let mut g = self.lock();
        match g.phase {
            Phase::Train => g.snap.train.entry((site, kind)).or_default().add(&call),
            Phase::Eval => g.snap.eval.entry(kind).or_default().add(&call),
        }
    }

    pub fn snapshot(&self) -> TallySnapshot {
        self.lock().snap.clone()
    }

    /// Replaces what was recorded with `snap` (a resumed run takes up its history).
    pub fn restore(&self, snap: TallySnapshot) {
        self.lock().snap = snap;
    }

    pub fn reset(&self) {
        self.lock().snap = TallySnapshot::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serde's names and the labels are one list: they cannot drift apart.
    #[test]
    fn every_kind_and_dtype_is_labelled_by_its_serde_name() {
        for k in CommKind::all() {
            assert_eq!(serde_json::to_value(k).unwrap(), k.label());
        }
        assert_eq!(CommKind::all().count(), 5);
        for d in crate::comm::CommDtype::all() {
            assert_eq!(serde_json::to_value(d).unwrap(), d.label());
        }
        assert_eq!(crate::comm::CommDtype::all().count(), 4);
    }

    #[test]
    fn a_snapshot_reads_back_from_json_exactly_with_every_site() {
        let t = Tally::new();
        let call = Call {
            bytes: 96,
            seconds: 1.5e-5,
            modelled_seconds: 0.0,
            hidden_seconds: 1e-5,
            group_size: 2,
        };
        for site in [
            Site::Embedding,
            Site::Layer(0),
            Site::Layer(11),
            Site::Head,
            Site::Params,
            Site::Misc,
        ] {
            t.record(site, CommKind::TpForward, call);
        }
        t.record(Site::Layer(3), CommKind::TpBackward, call);
        {
            let _eval = t.enter(Phase::Eval);
            t.record(Site::Misc, CommKind::Other, call);
        }
        assert_eq!(t.phase(), Phase::Train, "the guard restores the phase");
        let failing = || -> Result<(), &str> {
            let _eval = t.enter(Phase::Eval);
            Err("an evaluation that fails")
        };
        assert!(failing().is_err());
        assert_eq!(t.phase(), Phase::Train, "restored on the error path too");
        let snap = t.snapshot();
        let json = serde_json::to_string(&snap).unwrap();
        let back: TallySnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
        assert_eq!(back.at(Site::Layer(11), CommKind::TpForward).calls, 1);
        assert_eq!(back.eval[&CommKind::Other].bytes, 96);
        let restored = Tally::new();
        restored.restore(back);
        assert_eq!(restored.snapshot(), snap);
        assert!(
            serde_json::from_str::<TallySnapshot>(&json.replace("layer.11", "layer.x")).is_err()
        );
    }
}
