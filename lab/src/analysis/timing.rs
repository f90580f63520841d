//! Time per step, as measured and as it would be on another link. One definition each:
//!
//! - **step time**: the median wall-clock ms of a run's logged steps (`log.jsonl`, the
//!   whole run: a resumed run's earlier invocations included);
//! - **communication time**: the seconds its collectives took per step (`comm.json`,
//!   emulated link delays and barrier waits included);
//! - **compute time**: the slowest rank's compute, each rank's measured as the CPU time
//!   of its own thread less what it spent inside collectives (`comm.json`'s `compute`):
//!   as if every rank had a machine of its own, however many ranks shared this one's
//!   cores. Where a run did not measure that (a GPU, ranks with several math threads, a
//!   comm.json without `compute`) its step time less its communication time, which holds
//!   only where every rank had cores of its own;
//! - **time on a link**: compute time plus the ring all-reduce time of the step's
//!   collectives (calls and bytes by kind, each over the group the tally recorded it on)
//!   on that link ([`tp_harness::comm::link`]).
//!
//! This is how a loss curve is put against the time it would take on 10 GbE or NVLink,
//! from one run on any machine.

use super::stats::median;
use crate::run_dir::{read_comm, read_log, CommReport, LogLine, RankCompute};
use anyhow::Result;
use std::path::Path;
use tp_harness::comm::{link_catalog, CommKind, LinkModel};
use tp_harness::error::user;

/// The step time of a run: the median ms of its logged steps.
pub fn step_ms(log: &[LogLine]) -> Option<f64> {
    median(log.iter().filter_map(|l| l.ms).collect())
}

/// A link to model: its name in file names, its label in tables and plots, its model,
/// and where the model's constants come from (printed with every modelled time).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub slug: String,
    pub label: String,
    pub model: LinkModel,
    pub calibration: String,
}

/// A link by its name in the catalogue ([`link_catalog`]: `nvlink4`, `ib-ndr`, `10gbe`,
/// ...) or as `GBIT:LATENCY_US` (bandwidth delivered in Gbit/s a direction, as
/// `link_gbps`; latency a message in microseconds, as `link_latency_us`).
pub fn parse_link(s: &str) -> Result<Link> {
    let l = link_catalog::find(s).map_err(user)?;
    let given = l.provenance == "given";
    Ok(Link {
        slug: if given {
            format!("{}gbit_{}us", l.gbit_per_s, l.latency_us).replace('.', "p")
        } else {
            l.name.clone()
        },
        label: if given {
            format!("{} Gbit/s, {} us", l.gbit_per_s, l.latency_us)
        } else {
            l.label.clone()
        },
        model: l.model(),
        calibration: if given {
            format!(
                "given as --link {}:{} ({} Gbit/s delivered, {} us a message)",
                l.gbit_per_s, l.latency_us, l.gbit_per_s, l.latency_us
            )
        } else {
            format!(
                "`{}` from the link catalogue ({} constants: {}); a link calibrated on your machine (scripts/cluster/link-calibration.sh) is given as --link GBIT:LATENCY_US",
                l.name,
                l.provenance,
                l.describe()
            )
        },
    })
}

/// One kind of collective per optimiser step.
#[derive(Debug, Clone, PartialEq)]
pub struct KindPerStep {
    pub kind: CommKind,
    pub calls: f64,
    pub bytes: f64,
    /// Measured seconds, from each call's start to its result.
    pub seconds: f64,
    /// Of `seconds`, the windows the rank computed through (started all-reduces: from
    /// start to wait); 0 for blocking collectives.
    pub hidden: f64,
    /// Ranks of the group the calls ran over, as the tally recorded them.
    pub group: usize,
}

/// The time a run's step took and what its collectives were, per optimiser step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTiming {
    /// The step time ([`step_ms`]).
    pub step_ms: f64,
    pub comm: Vec<KindPerStep>,
    /// The link the run emulated (`link_gbps`, `link_latency_us`), if any.
    pub emulated: Option<LinkModel>,
    /// Each rank's compute as its thread's CPU time, where measured.
    pub compute: Option<RankCompute>,
}

impl StepTiming {
    pub fn new(step_ms: f64, report: &CommReport) -> Self {
        Self {
            step_ms,
            comm: report
                .per_step
                .iter()
                .map(|(&kind, s)| KindPerStep {
                    kind,
                    calls: s.calls,
                    bytes: s.bytes,
                    seconds: s.seconds,
                    hidden: s.hidden_seconds,
                    group: report.group_size(kind),
                })
                .collect(),
            emulated: report.emulated_link,
            compute: report.compute.clone(),
        }
    }

    /// A run's step timing from its log and comm.json, if it has both.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let Some(report) = read_comm(dir)? else {
            return Ok(None);
        };
        Ok(step_ms(&read_log(dir)?).map(|ms| Self::new(ms, &report)))
    }

    /// Communication seconds per step the step waited for (exposed), as measured.
    pub fn comm_seconds(&self) -> f64 {
        self.comm.iter().map(|c| c.seconds - c.hidden).sum()
    }

    /// Compute seconds per step: the slowest rank's thread CPU time where measured, else
    /// the step minus the communication it waited for.
    pub fn compute_seconds(&self) -> f64 {
        match &self.compute {
            Some(c) => c.max_ms() / 1e3,
            None => self.wall_compute_seconds(),
        }
    }

    /// The step minus the communication rank 0 waited for: its compute where every rank
    /// had cores of its own, else including its turns waiting for a core.
    pub fn wall_compute_seconds(&self) -> f64 {
        (self.step_ms / 1e3 - self.comm_seconds()).max(0.0)
    }

    /// How the compute part of a modelled step was measured, for tables and captions.
    pub fn compute_source(&self) -> String {
        match &self.compute {
            Some(c) => format!(
                "slowest rank's thread CPU time, imbalance {:.1}%",
                100.0 * c.imbalance()
            ),
            None => "step time less communication".into(),
        }
    }

    /// The ring model's terms of the step's collectives: (bits each rank sends, message
    /// latencies).
    pub fn ring_terms(&self) -> (f64, f64) {
        self.comm
            .iter()
            .map(|c| tp_harness::comm::link::ring_terms(c.calls, c.bytes, c.group))
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y))
    }

    /// Seconds of the step's collectives on `link` that the step waits for: each kind's
    /// ring time, less the compute windows its started all-reduces ran through (the
    /// ladder's, forward and backward; the gradient buckets' behind backprop). Summed per kind, which is exact while every call's link time is
    /// at least its window and optimistic where a window outlasts its call.
    pub fn comm_seconds_on(&self, link: &LinkModel) -> f64 {
        self.comm
            .iter()
            .map(|c| {
                let on_link = link.seconds(c.calls.round() as u64, c.bytes.round() as u64, c.group);
                (on_link - c.hidden).max(0.0)
            })
            .sum()
    }

    /// Modelled seconds per step on `link`.
    pub fn step_seconds_on(&self, link: &LinkModel) -> f64 {
        self.compute_seconds() + self.comm_seconds_on(link)
    }

    /// For a run that emulated a link: its measured ms per step and what the model
    /// predicts on that link (measured compute plus the link's ring time).
    pub fn emulation_check(&self) -> Option<(f64, f64)> {
        let link = self.emulated.as_ref()?;
        Some((self.step_ms, 1e3 * self.step_seconds_on(link)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_by_name_and_as_gbit_and_latency() {
        // The catalogue's 10 GbE: 96% of the line rate (the TCP fit), 25 us a message.
        let l = parse_link("10GbE").unwrap();
        assert_eq!(
            (l.slug.as_str(), l.model.gbit_per_s, l.model.latency_us),
            ("10gbe", 9.6, 25.0)
        );
        assert!(l.label.contains("10 GbE"), "{}", l.label);
        assert!(l.calibration.contains("assumed"), "{}", l.calibration);
        let nvlink = parse_link("nvlink").unwrap().model;
        assert_eq!((nvlink.gbit_per_s, nvlink.call_us), (2880.0, 8.4));
        let l = parse_link("0.1:50").unwrap();
        assert_eq!((l.model.gbit_per_s, l.model.latency_us), (0.1, 50.0));
        assert_eq!(
            (l.slug.as_str(), l.label.as_str()),
            ("0p1gbit_50us", "0.1 Gbit/s, 50 us")
        );
        let e = parse_link("-1:2").unwrap_err().to_string();
        assert!(e.contains("must be a positive finite number"), "{e}");
        for bad in ["", "5g", "10:", "x:y"] {
            let e = parse_link(bad).unwrap_err().to_string();
            assert!(
                e.contains("ib-ndr") && e.contains("10gbe, 1gbe, 100mbit") && e.contains("Gbit/s"),
                "{bad}: {e}"
            );
        }
    }

    fn kind(kind: CommKind, calls: f64, bytes: f64, seconds: f64, group: usize) -> KindPerStep {
        KindPerStep {
            kind,
            calls,
            bytes,
            seconds,
            hidden: 0.0,
            group,
        }
    }

    /// Hand-worked: a 20 ms step that measured 2 ms of communication computes for 18 ms;
    /// its 8 tp all-reduces of 1.25 MB in total at tp 2 take 2(1/2)1e7 bits/1e10 + 8 x 2
    /// x 25 us = 1.4 ms on a 10 Gbit/s, 25 us link; the dp gradient average over a group
    /// of one is free.
    #[test]
    fn modelled_step_is_measured_compute_plus_the_links_ring_time() {
        let t = StepTiming {
            step_ms: 20.0,
            comm: vec![
                kind(CommKind::TpForward, 4.0, 625_000.0, 0.0015, 2),
                kind(CommKind::TpBackward, 4.0, 625_000.0, 0.0005, 2),
                kind(CommKind::DpGrad, 1.0, 1e6, 0.0, 1),
            ],
            emulated: None,
            compute: None,
        };
        let gbe = parse_link("10:25").unwrap().model;
        assert!((t.compute_seconds() - 0.018).abs() < 1e-12);
        assert!((t.comm_seconds_on(&gbe) - 0.0014).abs() < 1e-12);
        assert!((t.step_seconds_on(&gbe) - 0.0194).abs() < 1e-12);
        assert_eq!(t.ring_terms(), (1e7, 16.0));
    }

    /// The same step with its forward all-reduces started 0.5 ms before they were waited
    /// for (a ladder): that 0.5 ms was compute, so compute is 18.5 ms; on 10 Gbit/s the
    /// forward ones' 0.7 ms shrink to 0.2 ms exposed, on a link 100x faster to nothing.
    #[test]
    fn started_all_reduces_hide_up_to_their_window_on_a_link() {
        let mut fwd = kind(CommKind::TpForward, 4.0, 625_000.0, 0.0015, 2);
        fwd.hidden = 0.0005;
        let t = StepTiming {
            step_ms: 20.0,
            comm: vec![fwd, kind(CommKind::TpBackward, 4.0, 625_000.0, 0.0005, 2)],
            emulated: None,
            compute: None,
        };
        assert!((t.compute_seconds() - 0.0185).abs() < 1e-12);
        let gbe = parse_link("10:25").unwrap().model;
        assert!((t.comm_seconds_on(&gbe) - (0.0002 + 0.0007)).abs() < 1e-12);
        let fast = LinkModel {
            gbit_per_s: 1000.0,
            latency_us: 0.25,
            call_us: 0.0,
        };
        let backward_only = fast.seconds(4, 625_000, 2);
        assert!((t.comm_seconds_on(&fast) - backward_only).abs() < 1e-12);
    }

    /// Four ranks sharing two cores: rank 0's 20 ms step waited 2 ms in collectives, but
    /// its 18 ms "compute" includes the turns it waited for a core. Each rank's own thread
    /// computed 9-10 ms: the modelled step computes for the slowest, 10 ms.
    #[test]
    fn measured_thread_cpu_time_is_the_compute_and_the_slowest_rank_sets_it() {
        let mut t = StepTiming {
            step_ms: 20.0,
            comm: vec![kind(CommKind::TpForward, 4.0, 625_000.0, 0.002, 4)],
            emulated: None,
            compute: None,
        };
        assert!((t.compute_seconds() - 0.018).abs() < 1e-12);
        assert_eq!(t.compute_source(), "step time less communication");
        t.compute = Some(RankCompute {
            per_rank_ms: vec![9.0, 10.0, 9.5, 9.0],
            per_rank_wall_ms: vec![18.0; 4],
            steps: 100,
        });
        assert!((t.compute_seconds() - 0.010).abs() < 1e-12);
        assert!((t.wall_compute_seconds() - 0.018).abs() < 1e-12);
        assert!(
            t.compute_source().contains("imbalance 10.0%"),
            "{}",
            t.compute_source()
        );
        let gbe = parse_link("10gbe").unwrap().model;
        let ring = gbe.seconds(4, 625_000, 4);
        assert!((t.step_seconds_on(&gbe) - (0.010 + ring)).abs() < 1e-12);
    }

    #[test]
    fn the_step_time_is_the_median_of_the_logged_steps() {
        let line = |ms| LogLine {
            ms,
            ..Default::default()
        };
        let log = [
            line(Some(9.0)),
            line(None),
            line(Some(3.0)),
            line(Some(5.0)),
        ];
        assert_eq!(step_ms(&log), Some(5.0));
        assert_eq!(step_ms(&[]), None);
    }
}
