//! `tp-plan`: what a layout would mean on a real cluster, from the harness's own counts
//! and link model. For each tp, layout and link: compute per step, each collective
//! kind's calls and bytes (latency and bandwidth parts apart), hidden and exposed time,
//! the step time and the speed-up over Megatron's `t` everywhere under the same
//! assumptions, the bandwidths at which the layout pays (>= 1.10x) and the one its
//! communication needs to cost under 5% of the step; and the study's measured loss
//! penalty nearest to the request, never an extrapolated one.

pub mod buckets;
pub mod catalog;
pub mod evidence;
pub mod memory;
pub mod plot;
pub mod question;
pub mod request;
pub mod schedule;

use evidence::Evidence;
use request::{FlopConvention, Request, StepFlops};
use schedule::{at_bandwidth, bands, crossing, plan_step, StepPlan, SEARCHED_GBIT};
use tp_harness::comm::NamedLink;

/// A speed-up over t-only worth a layout's loss risk: the break-even line.
pub const PAYS: f64 = 1.10;
/// Communication this small a share of the step is "hidden enough".
pub const NEGLIGIBLE: f64 = 0.05;

/// The device's rate, and where it came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rate {
    pub flops_per_s: f64,
    pub source: String,
}

/// One row of the answer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanRow {
    pub step: StepPlan,
    pub step_s: f64,
    pub hidden_s: f64,
    pub exposed_s: f64,
    /// Over the t-only layout at the same tp, link and device.
    pub speedup: f64,
    /// Where (Gbit/s, this link's latency) the layout is >= PAYS x faster than t-only.
    pub pays: Pays,
    /// Where its exposed communication is under NEGLIGIBLE of the step.
    pub negligible: Negligible,
    pub evidence: Option<Evidence>,
    /// One rank's memory at the requested batch, and the largest batch that fits.
    pub memory: memory::Memory,
}

/// The whole answer: its assumptions and its rows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub model: request::Shape,
    pub params: f64,
    pub batch: usize,
    pub dp: usize,
    pub comm_dtype: String,
    pub flops: FlopConvention,
    pub rate: Rate,
    /// The data-parallel group's link: its name, or `same as tp` (each row's TP link).
    pub dp_link: String,
    pub links: Vec<NamedLink>,
    /// How the tied embedding and head are laid out over the TP group.
    pub head: request::Head,
    /// Measured MFUs to set `--mfu` by (with a GPU named).
    pub mfu_references: Vec<catalog::MfuReference>,
    pub rows: Vec<PlanRow>,
    /// How many study runs the evidence was looked for in.
    pub study_runs: usize,
    /// Step time against the TP link's bandwidth at each link's latency, per tp and
    /// layout (t-only included): the crossover figure's data (it draws the first link's).
    pub curves: Vec<Curve>,
    /// The tool that made the plan: `tp-plan` and its version.
    pub tool: String,
}

impl Plan {
    /// `plan.json`: the plan with every negative zero written as 0 (a clamped time of
    /// -0.0 reads as a sign where there is none).
    pub fn json(&self) -> anyhow::Result<String> {
        fn unsign(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Number(n) if n.is_f64() && n.as_f64() == Some(0.0) => {
                    *v = serde_json::Value::from(0.0);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(unsign),
                serde_json::Value::Object(o) => o.values_mut().for_each(unsign),
                _ => {}
            }
        }
        let mut v = serde_json::to_value(self)?;
        unsign(&mut v);
        Ok(serde_json::to_string_pretty(&v)?)
    }
}

/// One layout's step time (ms) at each bandwidth (Gbit/s), at one link's latency.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Curve {
    pub pattern: String,
    pub tp: usize,
    /// The link whose latency the curve keeps.
    pub link: String,
    pub points: Vec<(f64, f64)>,
}

/// `r`'s curve over 0.1 to 10,000 Gbit/s at `link`'s latency.
pub fn curve(
    r: &Request,
    conv: FlopConvention,
    rate: f64,
    link: &NamedLink,
    dp_link: Option<&NamedLink>,
) -> Curve {
    let points = (0..=50)
        .map(|i| {
            let g = 10f64.powf(-1.0 + 5.0 * i as f64 / 50.0);
            let l = at_bandwidth(link, g);
            (
                g,
                step_on(r, conv, rate, &l, dp_link.or(Some(link))).step_s() * 1e3,
            )
        })
        .collect();
    Curve {
        pattern: r.layout.pattern.clone(),
        tp: r.tp,
        link: link.name.clone(),
        points,
    }
}

/// The step of `r` at `rate` on `link` (its DP group on `dp_link`, or the same link).
pub fn step_on(
    r: &Request,
    conv: FlopConvention,
    rate: f64,
    link: &NamedLink,
    dp_link: Option<&NamedLink>,
) -> StepPlan {
    let flops = StepFlops::of(r, conv);
    plan_step(r, &flops, rate, link, dp_link.unwrap_or(link))
}

/// A row: `r`'s step against `baseline`'s (t-only) and its break-even bandwidths, on its
/// TP link and its DP group's (the same where `None`).
pub fn row(
    r: &Request,
    baseline: &Request,
    conv: FlopConvention,
    rate: f64,
    (link, dp_link): (&NamedLink, Option<&NamedLink>),
    evidence: Option<Evidence>,
    memory: memory::Memory,
) -> PlanRow {
    let step = step_on(r, conv, rate, link, dp_link);
    let base = step_on(baseline, conv, rate, link, dp_link);
    let at = |req: &Request, g: f64| {
        let l = at_bandwidth(link, g);
        step_on(req, conv, rate, &l, dp_link.or(Some(link))).step_s()
    };
    let speedup_at = |g: f64| at(baseline, g) / at(r, g);
    let share_at = |g: f64| {
        let s = step_on(
            r,
            conv,
            rate,
            &at_bandwidth(link, g),
            dp_link.or(Some(link)),
        );
        s.exposed_s() / s.step_s()
    };
    PlanRow {
        step_s: step.step_s(),
        hidden_s: step.hidden_s(),
        exposed_s: step.exposed_s(),
        speedup: base.step_s() / step.step_s(),
        pays: Pays::of(bands(speedup_at, PAYS)),
        negligible: match crossing(share_at, NEGLIGIBLE) {
            None => Negligible::Never,
            Some(g) if g <= SEARCHED_GBIT.0 => Negligible::EveryBandwidth,
            Some(g) => Negligible::Above { gbit: g },
        },
        evidence,
        memory,
        step,
    }
}

/// Where a layout pays (>= PAYS x over t-only) as the bandwidth of its TP link varies
/// (its latency kept), searched over [`SEARCHED_GBIT`]: at none, at every one, or in
/// bands with explicit ends (`from_gbit: null` is "from the lowest searched", `to_gbit:
/// null` "to the highest"). Serialised with its kind spelt out, never as a sentinel
/// number.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "where", rename_all = "snake_case")]
pub enum Pays {
    Never,
    EveryBandwidth,
    Bands { bands: Vec<Band> },
}

/// One band of bandwidth, Gbit/s; an open end is `None`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Band {
    pub from_gbit: Option<f64>,
    pub to_gbit: Option<f64>,
}

impl Pays {
    fn of(found: Vec<(f64, f64)>) -> Self {
        let (lo, hi) = SEARCHED_GBIT;
        match found.as_slice() {
            [] => Pays::Never,
            [(a, b)] if *a <= lo && *b >= hi => Pays::EveryBandwidth,
            _ => Pays::Bands {
                bands: found
                    .into_iter()
                    .map(|(a, b)| Band {
                        from_gbit: (a > lo).then_some(a),
                        to_gbit: (b < hi).then_some(b),
                    })
                    .collect(),
            },
        }
    }

    /// `below 12.3`, `above 4.1`, `4.1 to 410`, `every bandwidth`, `never`.
    pub fn text(&self) -> String {
        let g = |v: f64| format!("{v:.3}");
        match self {
            Pays::Never => "never".into(),
            Pays::EveryBandwidth => "every bandwidth".into(),
            Pays::Bands { bands } => bands
                .iter()
                .map(|b| match (b.from_gbit, b.to_gbit) {
                    (None, Some(t)) => format!("below {}", g(t)),
                    (Some(f), None) => format!("above {}", g(f)),
                    (Some(f), Some(t)) => format!("{} to {}", g(f), g(t)),
                    (None, None) => "every bandwidth".into(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Above which bandwidth a layout's exposed communication is under [`NEGLIGIBLE`] of
/// its step: named cases, no sentinel numbers (`plan.json`: `{"where": "never"}`,
/// `{"where": "every_bandwidth"}` or `{"where": "above", "gbit": G}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "where", rename_all = "snake_case")]
pub enum Negligible {
    /// Latency alone is more, at any bandwidth searched.
    Never,
    EveryBandwidth,
    Above {
        gbit: f64,
    },
}

impl Negligible {
    fn text(&self) -> String {
        match self {
            Negligible::Never => "never (latency alone)".into(),
            Negligible::EveryBandwidth => "every bandwidth".into(),
            Negligible::Above { gbit } => format!("{gbit:.3}"),
        }
    }
}

impl Plan {
    /// The answer as Markdown: the assumptions, a table per link, each row's
    /// collectives, the evidence and every flag.
    pub fn markdown(&self) -> String {
        let m = &self.model;
        let mut s = format!(
            "# tp-plan: {} ({} layers, {} heads, width {}, vocab {}, {:.1} M parameters)\n\n",
            m.name,
            m.n_layer,
            m.n_head,
            m.n_embd,
            m.vocab,
            self.params / 1e6
        );
        s += &format!(
            "Per step and rank: {} sequences of {} tokens, dp {}, TP sums in {}, the embedding and LM head {} (`--head` for the other); compute at {:.1} TFLOP/s ({}); FLOPs counted the {} way (Megatron halves causal attention's score and value matmuls, torchtitan does not: {}). Hidden time assumes the link's time costs the rank no compute; NCCL's collectives are kernels on the GPU's SMs and a CPU's MPI progress thread takes a core (docs/planner.md), so a hidden sum is cheaper than an exposed one but not free.\n\n",
            self.batch,
            m.block,
            self.dp,
            self.comm_dtype,
            self.head.label(),
            self.rate.flops_per_s / 1e12,
            self.rate.source,
            match self.flops {
                FlopConvention::Megatron => "Megatron",
                FlopConvention::Full => "full (torchtitan)",
            },
            "`--flops full` for the other"
        );
        if !self.mfu_references.is_empty() {
            s += "Measured MFUs to set `--mfu` by (GPT-2 124M, batch 8 x 1024, bf16, tp 1; 6N + 12LTC FLOPs a token against 989 TFLOP/s, attention whole, so 5-7% above the Megatron count at this size):\n\n";
            for r in &self.mfu_references {
                s += &format!("- {:.3}: {} ({})\n", r.mfu, r.what, r.source);
            }
            s += "\n";
        }
        let t_only = format!("{}xt", m.n_layer);
        for l in &self.links {
            s += &format!("## {} — {}\n\n", l.name, l.describe());
            s += "| pattern | tp | compute ms | comm ms (latency + bandwidth) | hidden ms | exposed ms | step ms | x over t-only | pays (>= 1.10x) at Gbit/s | comm < 5% above Gbit/s |\n|---|---|---|---|---|---|---|---|---|---|\n";
            for r in self.rows.iter().filter(|r| r.step.link == l.name) {
                let lat: f64 = r.step.kinds.iter().map(|k| k.latency_s).sum();
                let bw: f64 = r.step.kinds.iter().map(|k| k.bandwidth_s).sum();
                s += &format!(
                    "| {} | {} | {:.2} | {:.2} ({:.2} + {:.2}) | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
                    r.step.pattern,
                    r.step.tp,
                    r.step.compute_s * 1e3,
                    (lat + bw) * 1e3,
                    lat * 1e3,
                    bw * 1e3,
                    r.hidden_s.max(0.0) * 1e3,
                    r.exposed_s * 1e3,
                    r.step_s * 1e3,
                    r.speedup,
                    match r.step.pattern == t_only {
                        true => "(the baseline)".to_string(),
                        false => r.pays.text(),
                    },
                    r.negligible.text(),
                );
            }
            s += "\n";
        }
        s + &self.details()
    }

    /// Memory per rank, once per (pattern, tp): it does not depend on the link.
    fn memory_table(&self) -> String {
        let Some(first) = self.rows.first() else {
            return String::new();
        };
        let m0 = &first.memory;
        let device = match (m0.device_gib, &m0.device_source) {
            (Some(g), Some(src)) => format!(
                "; the device has {g:.1} GiB ({src}), of which a step may use {:.0}% (the rest: the CUDA context, NCCL's buffers, fragmentation)",
                memory::USABLE * 100.0
            ),
            _ => "; no device memory known for this --device (a GPU name gives it)".into(),
        };
        let mut s = format!(
            "\n## Memory per rank\n\n{}; activations kept for backward by Korthikanti et al. 2022 (eq. 2, tensor parallel without sequence parallel, no recomputation) plus the embedding and the output layer ({}){device}.\n\n| pattern | tp | weights + grads + AdamW GiB | activations GiB (batch {}) | per sequence GiB | total GiB | largest batch that fits |\n|---|---|---|---|---|---|---|\n",
            m0.precision,
            self.head.label(),
            self.batch
        );
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.rows {
            if !seen.insert((r.step.pattern.clone(), r.step.tp)) {
                continue;
            }
            let m = &r.memory;
            s += &format!(
                "| {} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {} |\n",
                r.step.pattern,
                r.step.tp,
                m.weights_grads_optimizer_gib,
                m.activations_gib,
                m.activations_per_sequence_gib,
                m.total_gib,
                m.largest_batch.map_or("-".into(), |b| b.to_string())
            );
        }
        s
    }

    fn details(&self) -> String {
        let mut s = String::new();
        let mut flags = std::collections::BTreeSet::new();
        for l in &self.links {
            s += &format!("## Collectives per step on {}: time on the link and exposed\n\n| pattern | tp | kind | calls | MiB | link ms | of which latency | of which bandwidth | hidden ms | exposed ms |\n|---|---|---|---|---|---|---|---|---|---|\n", l.name);
            for r in self.rows.iter().filter(|r| r.step.link == l.name) {
                for k in &r.step.kinds {
                    let link = k.latency_s + k.bandwidth_s;
                    let hidden = k.hidden_s.max(0.0);
                    s += &format!(
                        "| {} | {} | {} | {:.0} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                        r.step.pattern,
                        r.step.tp,
                        k.kind.label(),
                        k.calls,
                        k.bytes / (1024.0 * 1024.0),
                        link * 1e3,
                        k.latency_s * 1e3,
                        k.bandwidth_s * 1e3,
                        hidden * 1e3,
                        (link - hidden).max(0.0) * 1e3
                    );
                }
            }
            s += "\n";
        }
        for r in &self.rows {
            flags.extend(r.step.kinds.iter().filter_map(|k| k.flag.clone()));
        }
        s += &self.memory_table();
        s += "\n## Loss: the study's measured penalty (val loss vs t-only, paired by seed)\n\n";
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.rows {
            if !seen.insert((r.step.pattern.clone(), r.step.tp)) {
                continue;
            }
            if r.step.pattern == format!("{}xt", self.model.n_layer) {
                s += &format!(
                    "- {} at tp {}: the baseline (Megatron's layout; penalties are against it)\n",
                    r.step.pattern, r.step.tp
                );
                continue;
            }
            s += &match &r.evidence {
                None if self.study_runs == 0 => format!("- {} at tp {}: no study runs given (--study DIR, or run from the repository, whose plots/study/runs it reads)\n", r.step.pattern, r.step.tp),
                None => format!("- {} at tp {}: no run of this layout or its family among the {} study runs given\n", r.step.pattern, r.step.tp, self.study_runs),
                Some(e) => format!(
                    "- {} at tp {}: {:+.4} {} for {} ({}; {}); measured at n_layer {}-{}, n_embd {}-{}, tp {}-{}, {}-{} iterations{}\n",
                    r.step.pattern, r.step.tp, e.penalty,
                    e.ci95.map_or("(one run: no interval)".to_string(), |c| format!("± {c:.4} (95%, n {})", e.n)),
                    e.setting, e.relation, e.how,
                    e.measured[0].0, e.measured[0].1, e.measured[1].0, e.measured[1].1,
                    e.measured[2].0, e.measured[2].1, e.measured[3].0, e.measured[3].1,
                    e.outside.as_ref().map_or(String::new(), |o| format!(". {o}"))
                ),
            };
        }
        if !flags.is_empty() {
            s += "\n## Priced without calibration\n\n";
            for f in flags {
                s += &format!("- {f}\n");
            }
        }
        s
    }
}
