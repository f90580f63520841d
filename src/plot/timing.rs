//! Wall-clock on a given interconnect, modelled from what a run measured: its compute
//! time per step (the median logged step minus the communication it measured, emulated
//! delays included) plus the ring all-reduce time of its collectives per step
//! (`comm.json`: calls and bytes by kind) on the link. This is how a loss curve is put
//! against the time it would take on 10 GbE or NVLink, from one run on any machine.

use crate::comm::LinkModel;
use crate::error::UserError;
use crate::run_dir::CommReport;
use anyhow::Result;

/// A link by name (`10gbe`, `ib100`, `pcie4`, `nvlink4`) or as `GBPS:LATENCY_US`
/// (bandwidth in Gbit/s per direction, as `link_gbps`; latency per message in
/// microseconds, as `link_latency_us`). Returns a label for plots and file names.
pub fn parse_link(s: &str) -> Result<(String, LinkModel)> {
    let named = |i: usize| {
        let (name, l) = crate::comm::NAMED_LINKS[i];
        Ok((name.to_string(), l))
    };
    match s.trim().to_ascii_lowercase().as_str() {
        "nvlink4" | "nvlink" => named(0),
        "pcie4" | "pcie" => named(1),
        "ib100" | "ib" | "infiniband" => named(2),
        "10gbe" => named(3),
        other => {
            let parsed = other.split_once(':').and_then(|(g, l)| {
                let (g, l) = (g.parse::<f64>().ok()?, l.parse::<f64>().ok()?);
                (g > 0.0 && g.is_finite() && l >= 0.0 && l.is_finite()).then_some((g, l))
            });
            match parsed.and_then(|(g, l)| LinkModel::from_config(g, l).map(|m| (g, l, m))) {
                Some((g, l, m)) => Ok((format!("{g} Gb/s, {l} us"), m)),
                None => Err(anyhow::Error::new(UserError(format!(
                    "link `{s}` is not one of 10gbe, ib100, pcie4, nvlink4 or GBPS:LATENCY_US (e.g. 10:25)"
                )))),
            }
        }
    }
}

/// A file-name-safe form of a link label.
pub fn slug(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    s.split('_')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("_")
}

/// What the time model needs of a run.
#[derive(Debug, Clone)]
pub struct StepTiming {
    /// Median wall-clock ms of the logged steps.
    pub step_ms: f64,
    /// Per optimiser step by kind: (calls, bytes, measured seconds).
    pub comm: Vec<(String, f64, f64, f64)>,
    pub tp: usize,
    pub dp: usize,
    /// The link the run emulated (`link_gbps`, `link_latency_us`), if any.
    pub emulated: Option<LinkModel>,
}

impl StepTiming {
    pub fn new(step_ms: f64, report: &CommReport) -> Self {
        Self {
            step_ms,
            comm: report
                .per_step
                .iter()
                .map(|(k, s)| (k.clone(), s.calls, s.bytes, s.seconds))
                .collect(),
            tp: report.tp,
            dp: report.dp,
            emulated: report.emulated_link,
        }
    }

    /// For a run that emulated a link: its measured ms per step and what the model
    /// predicts on that link (measured compute plus the link's ring time).
    pub fn emulation_check(&self) -> Option<(f64, f64)> {
        let link = self.emulated.as_ref()?;
        Some((self.step_ms, 1e3 * self.step_seconds_on(link)))
    }

    /// Compute seconds per step: the step minus the communication it measured.
    pub fn compute_seconds(&self) -> f64 {
        let comm: f64 = self.comm.iter().map(|c| c.3).sum();
        (self.step_ms / 1e3 - comm).max(0.0)
    }

    /// Seconds the step's collectives take on `link` (data-parallel gradients over the
    /// dp group, everything else over the tp group).
    pub fn comm_seconds_on(&self, link: &LinkModel) -> f64 {
        self.comm
            .iter()
            .map(|(kind, calls, bytes, _)| {
                let n = if kind.starts_with("dp") {
                    self.dp
                } else {
                    self.tp
                };
                link.seconds(calls.round() as u64, bytes.round() as u64, n)
            })
            .sum()
    }

    /// Modelled seconds per step on `link`.
    pub fn step_seconds_on(&self, link: &LinkModel) -> f64 {
        self.compute_seconds() + self.comm_seconds_on(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_by_name_and_as_bandwidth_and_latency() {
        let (name, l) = parse_link("10GbE").unwrap();
        assert_eq!(
            (name.as_str(), l.gbytes_per_s, l.latency_us),
            ("10 GbE", 1.25, 25.0)
        );
        assert_eq!(parse_link("nvlink4").unwrap().1.gbytes_per_s, 450.0);
        let (name, l) = parse_link("100:2").unwrap();
        assert_eq!((l.gbytes_per_s, l.latency_us), (12.5, 2.0));
        assert_eq!(slug(&name), "100_gb_s_2_us");
        for bad in ["", "5g", "10:", "-1:2", "x:y"] {
            let e = parse_link(bad).unwrap_err().to_string();
            assert!(e.contains("10gbe, ib100"), "{bad}: {e}");
        }
    }

    /// Hand-worked: a 20 ms step that measured 2 ms of communication computes for 18 ms;
    /// its 8 tp all-reduces of 1.25 MB in total at tp 2 take 2(1/2)1.25e6/1.25e9 s
    /// + 8 x 2 x 25 us = 1.4 ms on 10 GbE.
    #[test]
    fn modelled_step_is_measured_compute_plus_the_links_ring_time() {
        let t = StepTiming {
            step_ms: 20.0,
            comm: vec![
                ("tp-forward".into(), 4.0, 625_000.0, 0.0015),
                ("tp-backward".into(), 4.0, 625_000.0, 0.0005),
            ],
            tp: 2,
            dp: 1,
            emulated: None,
        };
        let (_, gbe) = parse_link("10gbe").unwrap();
        assert!((t.compute_seconds() - 0.018).abs() < 1e-12);
        assert!((t.comm_seconds_on(&gbe) - 0.0014).abs() < 1e-12);
        assert!((t.step_seconds_on(&gbe) - 0.0194).abs() < 1e-12);
    }
}
