//! One planned step on one link: compute from FLOPs and a rate, each collective kind
//! priced by the ring model (latency and bandwidth parts apart), and hidden where the
//! layout's schedule overlaps it with compute — a ladder's started all-reduces behind
//! the next module, gradient buckets behind the rest of backprop — never by a ratio
//! knob. Hidden time assumes communication takes no compute from the rank (NCCL's
//! copy engines; not a CPU's MPI progress thread, docs/links.md).

use super::request::{Request, StepFlops};
use tp_harness::blocks::spec::Hiding;
use tp_harness::blocks::BlockKind;
use tp_harness::comm::CommKind;
use tp_harness::comm::NamedLink;

/// One collective kind's step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KindTime {
    pub kind: CommKind,
    pub calls: f64,
    pub bytes: f64,
    pub latency_s: f64,
    pub bandwidth_s: f64,
    pub hidden_s: f64,
    /// Why its price has no calibration behind it, if it has none.
    pub flag: Option<String>,
}

impl KindTime {
    pub fn seconds(&self) -> f64 {
        self.latency_s + self.bandwidth_s
    }
    pub fn exposed_s(&self) -> f64 {
        self.seconds() - self.hidden_s
    }
}

/// A layout's step on a link.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepPlan {
    pub pattern: String,
    pub tp: usize,
    pub dp: usize,
    pub link: String,
    pub compute_s: f64,
    pub kinds: Vec<KindTime>,
}

impl StepPlan {
    pub fn comm_s(&self) -> f64 {
        self.kinds.iter().map(KindTime::seconds).sum()
    }
    pub fn hidden_s(&self) -> f64 {
        self.kinds.iter().map(|k| k.hidden_s).sum()
    }
    pub fn exposed_s(&self) -> f64 {
        self.comm_s() - self.hidden_s()
    }
    pub fn step_s(&self) -> f64 {
        self.compute_s + self.exposed_s()
    }
}

/// How much of the TP activation all-reduces the kinds that hide them behind the next
/// module (`Hiding::BehindNextModule`: the ladder) hide, forward and backward: in a run
/// of `L` such blocks the attention sum of block j runs behind block j's MLP and the MLP
/// sum behind block j+1's attention (`2L - 1` of `2L`; the last waits at the run's end),
/// each hidden up to the module's compute (backward: twice forward's).
fn hidden_behind_modules(
    r: &Request,
    per_call_s: f64,
    attn_s: f64,
    mlp_s: f64,
    backward: bool,
) -> f64 {
    let scale = if backward { 2.0 } else { 1.0 };
    let hiding: Vec<BlockKind> = BlockKind::all()
        .filter(|k| k.spec().hiding == Hiding::BehindNextModule)
        .collect();
    hiding
        .iter()
        .flat_map(|&k| r.layout.runs_of(k))
        .map(|(_, len)| {
            let len = len as f64;
            len * per_call_s.min(scale * mlp_s) + (len - 1.0) * per_call_s.min(scale * attn_s)
        })
        .sum()
}

/// The step of `r` computing at `flops_per_s`, its TP group on `tp_link` and its
/// data-parallel group on `dp_link`.
pub fn plan_step(
    r: &Request,
    flops: &StepFlops,
    flops_per_s: f64,
    tp_link: &NamedLink,
    dp_link: &NamedLink,
) -> StepPlan {
    let n_layer = r.shape.n_layer;
    let compute_s = flops.step(n_layer) / flops_per_s;
    let backward_s = 2.0 * flops.forward(n_layer) / flops_per_s;
    let (attn_s, mlp_s) = (flops.attention / flops_per_s, flops.mlp / flops_per_s);
    let kinds = r
        .traffic()
        .into_iter()
        .map(|t| {
            let link = if t.kind == CommKind::DpGrad {
                dp_link
            } else {
                tp_link
            };
            let (latency_s, bandwidth_s) = link.model().parts(t.calls, t.bytes, t.group);
            let total = latency_s + bandwidth_s;
            let per_call = if t.calls > 0.0 { total / t.calls } else { 0.0 };
            let hidden_s = match t.kind {
                CommKind::TpForward => hidden_behind_modules(r, per_call, attn_s, mlp_s, false),
                CommKind::TpBackward => hidden_behind_modules(r, per_call, attn_s, mlp_s, true),
                // Every bucket but the last is sealed while backprop goes on.
                CommKind::DpGrad | CommKind::TpParamGrad => {
                    (total * (t.calls - 1.0) / t.calls.max(1.0)).min(backward_s)
                }
                CommKind::Other => 0.0,
            };
            KindTime {
                kind: t.kind,
                calls: t.calls,
                bytes: t.bytes,
                latency_s,
                bandwidth_s,
                hidden_s: hidden_s.clamp(0.0, total),
                flag: link.flag(t.bytes / t.calls.max(1.0)),
            }
        })
        .collect();
    StepPlan {
        pattern: r.layout.pattern.clone(),
        tp: r.tp,
        dp: r.dp,
        link: tp_link.name.clone(),
        compute_s,
        kinds,
    }
}

/// The bandwidth (Gbit/s, searched over 0.01 to 100,000) at which `f`, falling as the
/// bandwidth grows, crosses `at`: `Some(0.01)` / `None` when it never / always is above.
pub fn crossing(f: impl Fn(f64) -> f64, at: f64) -> Option<f64> {
    let (mut lo, mut hi) = (0.01f64.ln(), 1e5f64.ln());
    if f(lo.exp()) < at {
        return Some(0.01);
    }
    if f(hi.exp()) >= at {
        return None;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if f(mid.exp()) >= at {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo.exp())
}

/// The bandwidths searched for where a layout pays: 0.01 to 100,000 Gbit/s.
pub const SEARCHED_GBIT: (f64, f64) = (0.01, 1e5);

/// The bands of bandwidth (Gbit/s, within [`SEARCHED_GBIT`]) where `f >= at`, whichever
/// way `f` runs: a speed-up that falls as bandwidth grows (fewer sums: pays below a
/// bandwidth), one that rises and falls (a ladder: its sums hidden once the link is fast
/// enough to finish them behind the next module, nothing left to hide once it is very
/// fast), or any other shape. A fine log grid finds each sign change and bisection places
/// it; a band touching the searched range's end is open there.
pub fn bands(f: impl Fn(f64) -> f64, at: f64) -> Vec<(f64, f64)> {
    let (lo, hi) = (SEARCHED_GBIT.0.ln(), SEARCHED_GBIT.1.ln());
    const STEPS: usize = 280;
    let x = |i: usize| lo + (hi - lo) * i as f64 / STEPS as f64;
    let above = |lx: f64| f(lx.exp()) >= at;
    // Between a point inside and one outside, the crossing to 1e-12 in log bandwidth.
    let edge = |mut inside: f64, mut outside: f64| {
        for _ in 0..50 {
            let mid = 0.5 * (inside + outside);
            if above(mid) {
                inside = mid;
            } else {
                outside = mid;
            }
        }
        inside.exp()
    };
    let mut out = Vec::new();
    let mut start: Option<f64> = above(x(0)).then_some(SEARCHED_GBIT.0);
    for i in 1..=STEPS {
        match (start, above(x(i))) {
            (None, true) => start = Some(edge(x(i), x(i - 1))),
            (Some(s), false) => {
                out.push((s, edge(x(i - 1), x(i))));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, SEARCHED_GBIT.1));
    }
    out
}

/// `link` at another bandwidth, its latency kept.
pub fn at_bandwidth(link: &NamedLink, gbit: f64) -> NamedLink {
    NamedLink {
        gbit_per_s: gbit,
        ..link.clone()
    }
}

#[cfg(test)]
mod band_tests {
    use super::*;

    /// A speed-up falling with bandwidth pays below a crossing (1.10 at 100 Gbit/s for
    /// 1 + 10/g); a hump (a ladder's shape) pays between two; one above the line
    /// everywhere pays at every bandwidth, one below it nowhere.
    #[test]
    fn bands_find_where_a_speedup_is_above_the_line_whichever_way_it_runs() {
        let falling = bands(|g| 1.0 + 10.0 / g, 1.10);
        assert_eq!(falling.len(), 1);
        assert_eq!(falling[0].0, SEARCHED_GBIT.0);
        assert!((falling[0].1 - 100.0).abs() < 1e-6, "{falling:?}");
        // A hump in log bandwidth, 1.3 at 100 Gbit/s, 1.1 at 10 and at 1000.
        let hump = bands(|g| 1.3 - 0.2 * (g / 100.0).log10().powi(2), 1.10);
        assert_eq!(hump.len(), 1);
        assert!(
            (hump[0].0 - 10.0).abs() < 1e-6 && (hump[0].1 - 1000.0).abs() < 1e-4,
            "{hump:?}"
        );
        assert_eq!(bands(|_| 1.5, 1.10), vec![SEARCHED_GBIT]);
        assert!(bands(|_| 1.0, 1.10).is_empty());
        // Rising: pays above.
        let rising = bands(|g| 1.0 + g / 1000.0, 1.10);
        assert!((rising[0].0 - 100.0).abs() < 1e-6 && rising[0].1 == SEARCHED_GBIT.1);
    }
}
