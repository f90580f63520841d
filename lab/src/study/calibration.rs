//! The link model held to real links: `tp-plot --link-calibration DIR` reads the runs
//! `scripts/cluster/link-calibration.sh` made (tp 2 over two network-namespace hosts joined by a
//! tc-shaped link, and the same patterns with both ranks in one process) and sets each
//! measured step time next to what the model predicts for it:
//!
//! `predicted = compute + sum over the step's collectives of the link's time`,
//!
//! with `compute` the in-process run's compute time ([`crate::analysis::timing`]), and the
//! collectives (calls, bytes, group) from the real run's own tally. Two models: the ring
//! model at the shaped rate with a nominal per-message latency, and the same form with
//! its two constants fitted to the measurements (an effective share of the rate and a
//! per-message cost, least squares over every cell), which is what the shaped TCP link
//! actually delivers. Also the time a pattern's training takes on each measured link.

use crate::analysis::runs::RunCurves;
use crate::analysis::table::Table;
use crate::analysis::timing::StepTiming;
use crate::config::Variant;
use crate::run_dir::read_summary;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use tp_harness::comm::LinkModel;

/// The nominal per-message latency of the ring model (a LAN's order of magnitude).
pub const NOMINAL_LATENCY_US: f64 = 50.0;

/// One pattern on one shaped link.
#[derive(Debug, Clone)]
pub struct Cell {
    pub pattern: String,
    /// The shaped rate, bits/s.
    pub rate_bits: f64,
    pub rate_label: String,
    pub measured_ms: f64,
    pub compute_ms: f64,
    /// Per step: the ring-model bandwidth term at the shaped rate (seconds at 1 bit/s,
    /// divided by the rate), and the number of per-message latencies.
    pub wire_bits: f64,
    pub messages: f64,
    /// The ring model at the shaped rate with [`NOMINAL_LATENCY_US`].
    pub nominal_ms: f64,
    /// The fitted model.
    pub fitted_ms: f64,
}

#[derive(Debug, Clone)]
pub struct Calibration {
    pub cells: Vec<Cell>,
    /// The share of the shaped rate the link delivers to the all-reduce's bytes.
    pub rate_share: f64,
    /// Seconds each message costs beyond its bytes.
    pub per_message_us: f64,
}

fn parse_rate(r: &str) -> Result<f64> {
    let l = r.to_ascii_lowercase();
    for (suffix, f) in [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)] {
        if let Some(v) = l.strip_suffix(suffix) {
            return Ok(v.parse::<f64>().with_context(|| format!("rate `{r}`"))? * f);
        }
    }
    bail!("rate `{r}` is not a tc rate (e.g. 200mbit)")
}

/// A finished run's step timing, or an error naming it.
fn timing(dir: &Path) -> Result<StepTiming> {
    if read_summary(dir)?.is_none() {
        bail!(
            "{} has no summary.json: the run did not finish",
            dir.display()
        );
    }
    StepTiming::load(dir)?.with_context(|| format!("{} has no step time", dir.display()))
}

/// Least squares of `comm = wire / (share * rate) + messages * c` over the cells: the
/// unknowns are `1/share` and `c >= 0`.
fn fit(cells: &[Cell]) -> (f64, f64) {
    let (mut aa, mut ab, mut bb, mut ay, mut by) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for c in cells {
        let a = c.wire_bits / c.rate_bits;
        let b = c.messages;
        let y = (c.measured_ms - c.compute_ms) / 1e3;
        aa += a * a;
        ab += a * b;
        bb += b * b;
        ay += a * y;
        by += b * y;
    }
    let det = aa * bb - ab * ab;
    if det.abs() > 1e-30 {
        let inv_share = (ay * bb - by * ab) / det;
        let c = (aa * by - ab * ay) / det;
        if c >= 0.0 && inv_share > 0.0 {
            return (1.0 / inv_share, c);
        }
    }
    // A message cannot save time: without a positive cost, the share alone.
    if aa > 0.0 && ay > 0.0 {
        (aa / ay, 0.0)
    } else {
        (1.0, 0.0)
    }
}

/// What a line of `runs.csv` lists (the words link-calibration.sh writes).
#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Listing {
    /// Both ranks in one process: the pattern's compute, nothing on a wire.
    Threads,
    /// One rank per host over a shaped link.
    Link,
}

/// A line of `runs.csv`: an in-process run or one over a shaped link.
#[derive(serde::Deserialize)]
struct Listed {
    kind: Listing,
    rate: String,
    pattern: String,
    run: String,
}

/// Reads `dir/runs.csv` and the runs it lists; see the module docs.
pub fn calibrate(dir: &Path) -> Result<Calibration> {
    let path = dir.join("runs.csv");
    let text = std::fs::read_to_string(&path).map_err(|_| {
        tp_harness::error::user(format!(
            "{} is missing: make the runs with scripts/cluster/link-calibration.sh {}",
            path.display(),
            dir.display()
        ))
    })?;
    let mut compute: BTreeMap<String, f64> = BTreeMap::new();
    let mut links = Vec::new();
    for line in csv::Reader::from_reader(text.as_bytes()).deserialize() {
        let Listed {
            kind,
            rate,
            pattern,
            run,
        } = line.with_context(|| format!("{}: a bad line", path.display()))?;
        let run = dir.join(run);
        match kind {
            Listing::Threads => {
                compute.insert(pattern, 1e3 * timing(&run)?.compute_seconds());
            }
            Listing::Link => links.push((rate, pattern, run)),
        }
    }
    let mut cells = Vec::new();
    for (rate, pattern, run) in links {
        let compute_ms = *compute.get(&pattern).with_context(|| {
            format!(
                "{}: no in-process run of {pattern} to take its compute from",
                path.display()
            )
        })?;
        let measured = timing(&run)?;
        let (wire_bits, messages) = measured.ring_terms();
        let rate_bits = parse_rate(&rate)?;
        let nominal = LinkModel {
            gbit_per_s: rate_bits / 1e9,
            latency_us: NOMINAL_LATENCY_US,
            call_us: 0.0,
        };
        let nominal_ms = compute_ms + 1e3 * measured.comm_seconds_on(&nominal);
        cells.push(Cell {
            pattern,
            rate_bits,
            rate_label: rate,
            measured_ms: measured.step_ms,
            compute_ms,
            wire_bits,
            messages,
            nominal_ms,
            fitted_ms: 0.0,
        });
    }
    if cells.is_empty() {
        bail!("{} lists no link runs", path.display());
    }
    let (rate_share, per_message) = fit(&cells);
    for c in &mut cells {
        c.fitted_ms = c.compute_ms
            + 1e3 * (c.wire_bits / (rate_share * c.rate_bits) + c.messages * per_message);
    }
    cells.sort_by(|a, b| {
        (a.pattern.as_str(), -a.rate_bits)
            .partial_cmp(&(b.pattern.as_str(), -b.rate_bits))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    Ok(Calibration {
        cells,
        rate_share,
        per_message_us: per_message * 1e6,
    })
}

impl Calibration {
    /// The markdown table: measured against both models, with their errors.
    pub fn markdown(&self) -> String {
        let mut t = Table::new([
            "pattern".to_string(),
            "link".into(),
            "measured ms/step".into(),
            "compute ms".into(),
            format!("ring model ({NOMINAL_LATENCY_US} us)"),
            "error".into(),
            "fitted model".into(),
            "error".into(),
        ]);
        for c in &self.cells {
            let err = |m: f64| format!("{:+.0}%", 100.0 * (m / c.measured_ms - 1.0));
            t.row([
                c.pattern.clone(),
                c.rate_label.clone(),
                format!("{:.1}", c.measured_ms),
                format!("{:.1}", c.compute_ms),
                format!("{:.1}", c.nominal_ms),
                err(c.nominal_ms),
                format!("{:.1}", c.fitted_ms),
                err(c.fitted_ms),
            ]);
        }
        let mut s = t.markdown();
        let _ = writeln!(
            s,
            "\nFitted: the link delivers {:.0}% of the shaped rate to the all-reduce's bytes, and each message costs {:.0} us.",
            100.0 * self.rate_share,
            self.per_message_us
        );
        let _ = writeln!(
            s,
            "To model a run on these links with this calibration instead of the nominal one: {}.",
            self.link_args().join(", ")
        );
        s
    }

    /// `--link GBIT:LATENCY_US` arguments of `tp-plot --x time` that apply the fitted
    /// constants to each measured rate.
    pub fn link_args(&self) -> Vec<String> {
        let mut rates: Vec<f64> = self.cells.iter().map(|c| c.rate_bits).collect();
        rates.sort_by(f64::total_cmp);
        rates.dedup();
        rates
            .iter()
            .map(|r| {
                let gbit = r * self.rate_share / 1e9;
                format!("`--link {}:{:.0}`", round_sig(gbit, 3), self.per_message_us)
            })
            .collect()
    }

    /// `calibration.csv`: one line per cell.
    pub fn csv(&self) -> String {
        let mut t = Table::new([
            "pattern",
            "rate_bits",
            "measured_ms",
            "compute_ms",
            "nominal_model_ms",
            "fitted_model_ms",
        ]);
        for c in &self.cells {
            t.row([
                c.pattern.clone(),
                c.rate_bits.to_string(),
                c.measured_ms.to_string(),
                c.compute_ms.to_string(),
                c.nominal_ms.to_string(),
                c.fitted_ms.to_string(),
            ]);
        }
        t.csv()
    }
}

/// `x` to `digits` significant digits, as the shortest decimal that shows them.
fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// A pattern's training curve on the measured links: what its loss costs in wall-clock
/// time on each real link. Training is the same on every link (the netns test holds the
/// real links to the threads backend bit for bit), so a link changes only the time per
/// step, which the calibration measured.
#[derive(Debug, Clone)]
pub struct OnRealLinks {
    pub pattern: String,
    pub forward_allreduces: Option<f64>,
    pub final_val: Option<f64>,
    pub final_ci95: Option<f64>,
    /// (step, val loss) of the (seed-mean) evaluations.
    pub val: Vec<(f64, f64)>,
    /// (rate label, rate bits/s, measured ms per step).
    pub step_ms: Vec<(String, f64, f64)>,
}

/// The first step at which `curve` reaches `target`, interpolating between evaluations.
pub fn step_reaching(curve: &[(f64, f64)], target: f64) -> Option<f64> {
    let first = curve.first()?;
    if first.1 <= target {
        return Some(first.0);
    }
    curve.windows(2).find_map(|w| {
        let ((s0, l0), (s1, l1)) = (w[0], w[1]);
        (l1 <= target).then(|| s0 + (s1 - s0) * (l0 - target) / (l0 - l1))
    })
}

/// Joins merged loss curves with the calibration's measured step times, by pattern.
pub fn on_real_links(cal: &Calibration, runs: &[RunCurves]) -> Vec<OnRealLinks> {
    runs.iter()
        .map(|r| OnRealLinks {
            pattern: r.variant.to_string(),
            forward_allreduces: r.forward_allreduces_per_step,
            final_val: r.final_val,
            final_ci95: r.final_ci95,
            val: r.val.clone(),
            step_ms: cal
                .cells
                .iter()
                .filter(|c| Variant::parse(&c.pattern).is_ok_and(|v| v == r.variant))
                .map(|c| (c.rate_label.clone(), c.rate_bits, c.measured_ms))
                .collect(),
        })
        .collect()
}

/// The table: per pattern, its all-reduces, final loss, and per link the measured step
/// time and the minutes to reach `target` (the worst pattern's final loss, so that
/// every pattern gets there).
pub fn real_links_markdown(rows: &[OnRealLinks], target: f64) -> String {
    let mut rates: Vec<(String, f64)> = rows
        .iter()
        .flat_map(|r| r.step_ms.iter().map(|(l, b, _)| (l.clone(), *b)))
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    rates.dedup();
    let mut t = Table::new(
        ["pattern", "fwd all-reduces / step", "final val loss"]
            .map(String::from)
            .into_iter()
            .chain(
                rates
                    .iter()
                    .map(|(l, _)| format!("{l}: ms/step, min to {target:.3}")),
            ),
    );
    for r in rows {
        let cells: Vec<String> = rates
            .iter()
            .map(|(l, _)| match r.step_ms.iter().find(|(x, _, _)| x == l) {
                Some((_, _, ms)) => match step_reaching(&r.val, target) {
                    Some(step) => format!("{ms:.1}, {:.2}", step * ms / 60e3),
                    None => format!("{ms:.1}, -"),
                },
                None => "-".into(),
            })
            .collect();
        let head = [
            r.pattern.clone(),
            r.forward_allreduces
                .map_or("-".into(), |f| format!("{f:.0}")),
            match (r.final_val, r.final_ci95) {
                (Some(v), Some(ci)) => format!("{v:.4} ± {ci:.4}"),
                (Some(v), None) => format!("{v:.4}"),
                _ => "-".into(),
            },
        ];
        t.row(head.into_iter().chain(cells));
    }
    t.markdown()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(rate: f64, wire: f64, msgs: f64, measured: f64) -> Cell {
        Cell {
            pattern: "t".into(),
            rate_bits: rate,
            rate_label: String::new(),
            measured_ms: measured,
            compute_ms: 10.0,
            wire_bits: wire,
            messages: msgs,
            nominal_ms: 0.0,
            fitted_ms: 0.0,
        }
    }

    /// Cells made from a known share and per-message cost give them back.
    #[test]
    fn the_fit_recovers_a_known_share_and_per_message_cost() {
        let (share, c) = (0.7, 120e-6);
        let cells: Vec<Cell> = [
            (1e9, 5e7, 30.0),
            (2e8, 5e7, 30.0),
            (1e8, 1e7, 200.0),
            (5e8, 2e7, 10.0),
        ]
        .iter()
        .map(|&(r, w, m)| cell(r, w, m, 10.0 + 1e3 * (w / (share * r) + m * c)))
        .collect();
        let (s, per) = fit(&cells);
        assert!(
            (s - share).abs() < 1e-9 && (per - c).abs() < 1e-12,
            "{s} {per}"
        );
        // What tp-plot --x time is told to apply it: the delivered rate and the cost.
        let cal = Calibration {
            cells,
            rate_share: s,
            per_message_us: per * 1e6,
        };
        assert_eq!(
            cal.link_args(),
            [
                "`--link 0.07:120`",
                "`--link 0.14:120`",
                "`--link 0.35:120`",
                "`--link 0.7:120`"
            ]
        );
        let parsed = crate::analysis::parse_link("0.7:120").unwrap();
        assert!(parsed.calibration.contains("given as --link 0.7:120"));
    }

    #[test]
    fn the_step_reaching_a_loss_interpolates_between_evaluations() {
        let curve = [(0.0, 4.0), (100.0, 3.0), (200.0, 2.0), (300.0, 1.5)];
        assert_eq!(step_reaching(&curve, 2.5), Some(150.0));
        assert_eq!(step_reaching(&curve, 4.5), Some(0.0));
        assert_eq!(step_reaching(&curve, 1.0), None);
    }

    #[test]
    fn rates_parse_as_tc_writes_them() {
        assert_eq!(parse_rate("1gbit").unwrap(), 1e9);
        assert_eq!(parse_rate("200mbit").unwrap(), 2e8);
        assert!(parse_rate("fast").is_err());
    }
}
