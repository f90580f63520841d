//! The named links: one catalogue for tp-plan, tp-plot, the per-run report and the docs
//! (docs/links.md's table is generated from it: `tp-plan --link list --markdown`, held
//! to the file by a test). Every number names where it comes from — a datasheet's line
//! rate, a bus bandwidth nccl-tests measured, NCCL's own latency constants, a fit made
//! here — or says that it is assumed.
//!
//! A link prices a ring all-reduce as NCCL's cost model does (NVIDIA/nccl,
//! src/graph/tuning.cc): a fixed cost a call (`baseLat`), a latency a ring step
//! (`hwLat`, 2(N-1) steps), and the bytes at the achievable bus bandwidth, which is the
//! line rate times an efficiency ([`super::link::LinkModel`]). Bandwidths are Gbit/s a
//! direction for one GPU's (or one host's) share of the link; a datasheet's "total"
//! NVLink figure counts both directions and is halved here.

use super::link::LinkModel;
use serde::Serialize;

/// A link the harness prices collectives on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedLink {
    pub name: String,
    pub label: String,
    /// The achievable bus bandwidth, Gbit/s a direction: `line_gbit_per_s * efficiency`.
    pub gbit_per_s: f64,
    /// One ring step's latency (a message), microseconds.
    pub latency_us: f64,
    /// A call's fixed cost, microseconds (NCCL's `baseLat`; 0 for plain TCP rings).
    pub call_us: f64,
    /// The line rate, Gbit/s a direction, and where it comes from.
    pub line_gbit_per_s: f64,
    pub line_source: String,
    /// The share of the line rate a ring all-reduce reaches, and where it comes from.
    pub efficiency: f64,
    pub efficiency_source: String,
    pub latency_source: String,
    /// Whom the bandwidth belongs to: `per GPU`, `per NIC (one per GPU)`, `per host`.
    pub scope: String,
    /// How the numbers were obtained: `fitted` (to measurements made here), `published`
    /// (datasheets, nccl-tests and NCCL's constants), `assumed` (a number no source
    /// gives), or `given` (the user's GBIT:US).
    pub provenance: String,
    /// The message sizes (bytes) within which a fit was checked; only fitted links.
    pub calibrated_bytes: Option<(f64, f64)>,
}

impl NamedLink {
    pub fn model(&self) -> LinkModel {
        LinkModel {
            gbit_per_s: self.gbit_per_s,
            latency_us: self.latency_us,
            call_us: self.call_us,
        }
    }

    /// Why a message of `bytes` on this link is priced without a fit, if it is.
    pub fn flag(&self, bytes: f64) -> Option<String> {
        match self.calibrated_bytes {
            None => Some(format!(
                "{}: {} constants, not fitted to a measurement of this link",
                self.name, self.provenance
            )),
            Some((lo, hi)) if bytes < lo || bytes > hi => Some(format!(
                "{}: a {:.0} KiB message lies outside its fitted {:.0}-{:.0} KiB",
                self.name,
                bytes / 1024.0,
                lo / 1024.0,
                hi / 1024.0
            )),
            _ => None,
        }
    }

    /// The link in one line: its numbers and their sources.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} Gbit/s a direction ({} x {} efficiency: {}; {}), {} us a ring step + {} us a call ({}) [{}]",
            self.label,
            round3(self.gbit_per_s),
            self.line_source,
            self.efficiency,
            self.efficiency_source,
            self.scope,
            self.latency_us,
            self.call_us,
            self.latency_source,
            self.provenance
        )
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// NCCL's constants for the ring's Simple protocol, the one large messages take
/// (NVIDIA/nccl src/graph/tuning.cc, 2.19 and later: `baseLat` Ring/Simple 8.4 us;
/// `hwLat` Ring/Simple 3.4 us on NVLink, 5.7 on PCIe, 14.0 on the network; NVLS 25 us
/// on NVLink with no per-step term).
const NCCL_BASE_US: f64 = 8.4;
const NCCL_NVLINK: &str =
    "NCCL tuning.cc ring Simple: hwLat 3.4 us a step on NVLink, baseLat 8.4 us";
const NCCL_PCI: &str = "NCCL tuning.cc ring Simple: hwLat 5.7 us a step on PCIe, baseLat 8.4 us";
const NCCL_NET: &str =
    "NCCL tuning.cc ring Simple: hwLat 14.0 us a step on the network, baseLat 8.4 us";
const NCCL_NVLS: &str = "NCCL tuning.cc: NVLS hwLat 25 us a call on NVLink (no ring steps)";
/// nccl-tests' all_reduce_perf bus bandwidth at large messages, as a provider's
/// validation guide tabulates it (docs.alayanew.com, "NCCL-tests in practice",
/// 2026-05-06): 8 x A100 SXM4 230-250 GB/s (NVLink 3), 8 x H100 SXM5 460-480 GB/s
/// (NVLink 4, NVLS), 8 x H100 PCIe without NVSwitch 35-45 GB/s (PCIe 5).
const NCCL_TESTS_A100: &str =
    "nccl-tests 8 x A100 SXM4 all-reduce busbw 230-250 GB/s of 300 (docs.alayanew.com, 2026-05-06)";
const RING_AS_A100: &str =
    "assumed: the ring's share measured on NVLink 3 (nccl-tests 8 x A100, 240 of 300 GB/s); no ring-only figure cited for this link";
const NCCL_TESTS_PCIE: &str =
    "nccl-tests 8 x H100 PCIe (no NVSwitch) busbw 35-45 GB/s of PCIe 5's 64 (docs.alayanew.com, 2026-05-06)";
const RDMA_EFFICIENCY: &str =
    "assumed: 90% of the line rate (no measured figure cited; fit your own with scripts/cluster/link-calibration.sh)";
const TCP_FIT: &str =
    "as fitted to shaped TCP between namespace hosts here (docs/links.md: 96% of the rate)";
const TCP_LATENCY: &str = "assumed: a TCP small-message latency (the study's 50 us for 1 GbE)";
const IEEE: &str = "IEEE 802.3 nominal rate";
const GPU: &str = "per GPU";
const NIC: &str = "per NIC (one per GPU)";
const HOST: &str = "per host";

/// One catalogue row: name, label, line Gbit/s, its source, efficiency, its source,
/// us a step, us a call, the latency's source, scope.
struct Row(
    &'static str,
    &'static str,
    f64,
    &'static str,
    f64,
    &'static str,
    f64,
    f64,
    &'static str,
    &'static str,
);

const ROWS: [Row; 18] = [
    Row("nvlink3", "NVLink 3 (A100), ring", 2400.0, "NVIDIA A100 datasheet: 600 GB/s total, 300 GB/s a direction", 0.8, NCCL_TESTS_A100, 3.4, NCCL_BASE_US, NCCL_NVLINK, GPU),
    Row("nvlink4", "NVLink 4 (H100, H200), ring", 3600.0, "NVIDIA H100 datasheet: 900 GB/s total, 450 GB/s a direction", 0.8, RING_AS_A100, 3.4, NCCL_BASE_US, NCCL_NVLINK, GPU),
    Row("nvlink4-nvls", "NVLink 4 (H100, H200) with NVLink SHARP", 3600.0, "NVIDIA H100 datasheet: 900 GB/s total, 450 GB/s a direction", 470.0 / 450.0, "nccl-tests 8 x H100 SXM5 all-reduce busbw 460-480 GB/s (docs.alayanew.com, 2026-05-06): the switch reduces, so the bus bandwidth passes the line rate", 0.0, 25.0, NCCL_NVLS, GPU),
    Row("nvlink5", "NVLink 5 (B200), ring", 7200.0, "NVIDIA B200 datasheet: 1.8 TB/s total, 900 GB/s a direction", 0.8, RING_AS_A100, 3.4, NCCL_BASE_US, NCCL_NVLINK, GPU),
    Row("pcie4", "PCIe 4 x16", 252.0, "PCI-SIG PCIe 4.0: 16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s a direction", 0.625, "assumed as PCIe 5's share (nccl-tests 8 x H100 PCIe busbw 35-45 GB/s of 64, docs.alayanew.com, 2026-05-06)", 5.7, NCCL_BASE_US, NCCL_PCI, GPU),
    Row("pcie5", "PCIe 5 x16", 504.0, "PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b: 63 GB/s a direction", 0.625, NCCL_TESTS_PCIE, 5.7, NCCL_BASE_US, NCCL_PCI, GPU),
    Row("ib-edr", "InfiniBand EDR", 100.0, "IBTA EDR: 100 Gbit/s a port (ConnectX-4/5)", 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("ib-hdr", "InfiniBand HDR", 200.0, "IBTA HDR: 200 Gbit/s a port (ConnectX-6)", 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("ib-ndr", "InfiniBand NDR", 400.0, "IBTA NDR: 400 Gbit/s a port (ConnectX-7)", 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("ib-xdr", "InfiniBand XDR", 800.0, "IBTA XDR: 800 Gbit/s a port (ConnectX-8)", 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("100gbe", "100 GbE (RoCE)", 100.0, IEEE, 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("200gbe", "200 GbE (RoCE)", 200.0, IEEE, 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("400gbe", "400 GbE (RoCE)", 400.0, IEEE, 0.9, RDMA_EFFICIENCY, 14.0, NCCL_BASE_US, NCCL_NET, NIC),
    Row("10gbe", "10 GbE (TCP)", 10.0, IEEE, 0.96, TCP_FIT, 25.0, 0.0, "assumed: a TCP small-message latency on 10 GbE", HOST),
    Row("1gbe", "1 GbE (TCP)", 1.0, IEEE, 0.96, TCP_FIT, 50.0, 0.0, TCP_LATENCY, HOST),
    Row("100mbit", "Fast Ethernet (TCP)", 0.1, IEEE, 0.96, TCP_FIT, 50.0, 0.0, TCP_LATENCY, HOST),
    Row("ns-1gbit", "shaped TCP between namespace hosts, 1 Gbit/s", 1.0, "the tc tbf rate of scripts/cluster/netns.sh", 0.96, "fitted: docs/links.md, 96% of the shaped rate", 8.0, 0.0, "fitted: docs/links.md, 8 us a message", HOST),
    Row("ns-100mbit", "shaped TCP between namespace hosts, 0.1 Gbit/s", 0.1, "the tc tbf rate of scripts/cluster/netns.sh", 0.96, "fitted: docs/links.md, 96% of the shaped rate", 8.0, 0.0, "fitted: docs/links.md, 8 us a message", HOST),
];

/// Other names a link answers to.
const ALIASES: [(&str, &str); 6] = [
    ("nvlink", "nvlink4"),
    ("pcie", "pcie4"),
    ("ib", "ib-ndr"),
    ("infiniband", "ib-ndr"),
    // tp-plot's earlier name for a 100 Gbit/s InfiniBand link.
    ("ib100", "ib-edr"),
    ("nvls", "nvlink4-nvls"),
];

/// The links a run's report projects its communication onto (`comm.json`).
pub const REPORT_LINKS: [&str; 5] = ["nvlink4", "pcie4", "ib-ndr", "10gbe", "1gbe"];

fn provenance(r: &Row) -> &'static str {
    let sources = [r.3, r.5, r.8];
    if sources.iter().any(|s| s.starts_with("fitted")) {
        "fitted"
    } else if sources.iter().any(|s| s.starts_with("assumed")) {
        "assumed"
    } else {
        "published"
    }
}

/// Every named link, in the catalogue's order.
pub fn links() -> Vec<NamedLink> {
    ROWS.iter()
        .map(|r| NamedLink {
            name: r.0.into(),
            label: r.1.into(),
            gbit_per_s: r.2 * r.4,
            latency_us: r.6,
            call_us: r.7,
            line_gbit_per_s: r.2,
            line_source: r.3.into(),
            efficiency: r.4,
            efficiency_source: r.5.into(),
            latency_source: r.8.into(),
            scope: r.9.into(),
            provenance: provenance(r).into(),
            calibrated_bytes: r
                .0
                .starts_with("ns-")
                .then_some((96.0 * 1024.0, 1536.0 * 1024.0)),
        })
        .collect()
}

/// The names `--link` takes, for error messages and help.
pub fn names() -> Vec<String> {
    links().into_iter().map(|l| l.name).collect()
}

/// A named link (or one of its aliases), or `GBIT:US` for one of the user's own: that
/// bandwidth delivered, that latency a ring step, no call cost.
pub fn find(spec: &str) -> Result<NamedLink, String> {
    let key = spec.trim().to_ascii_lowercase();
    let key = ALIASES
        .iter()
        .find(|(a, _)| *a == key)
        .map_or(key.as_str(), |(_, n)| n);
    if let Some(l) = links().into_iter().find(|l| l.name == key) {
        return Ok(l);
    }
    if let Some((g_text, us_text)) = spec.split_once(':') {
        if let (Ok(g), Ok(us)) = (g_text.trim().parse::<f64>(), us_text.trim().parse::<f64>()) {
            // Numbers, but out of range: say which, not "unknown link". The ranges keep
            // every modelled time finite (a 5e-324 Gbit/s link would make it infinite).
            if !(1e-6..=1e7).contains(&g) {
                return Err(format!(
                    "link `{spec}`: its bandwidth {g_text} Gbit/s must be a positive finite number from 1e-6 to 1e7 (e.g. 100:5)"
                ));
            }
            if !(0.0..=1e7).contains(&us) {
                return Err(format!(
                    "link `{spec}`: its latency {us_text} us must be zero or a positive finite number of microseconds up to 1e7 (e.g. 100:5)"
                ));
            }
            return Ok(NamedLink {
                name: format!("{g}:{us}"),
                label: format!("{g} Gbit/s, {us} us a message"),
                gbit_per_s: g,
                latency_us: us,
                call_us: 0.0,
                line_gbit_per_s: g,
                line_source: "given".into(),
                efficiency: 1.0,
                efficiency_source: "given (the bandwidth delivered)".into(),
                latency_source: "given".into(),
                scope: "as given".into(),
                provenance: "given".into(),
                calibrated_bytes: None,
            });
        }
    }
    Err(format!(
        "unknown link `{spec}`: name one of {} or give GBIT:US (Gbit/s delivered and microseconds a message, e.g. 100:5)",
        names().join(", ")
    ))
}

/// The catalogue as a Markdown table (docs/links.md holds it).
pub fn markdown() -> String {
    let mut s = String::from(
        "| name | link | line Gbit/s | efficiency | bus Gbit/s | us a step | us a call | scope | provenance | sources (line; efficiency; latency) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for l in links() {
        s += &format!(
            "| `{}` | {} | {} | {:.3} | {} | {} | {} | {} | {} | {}; {}; {} |\n",
            l.name,
            l.label,
            l.line_gbit_per_s,
            l.efficiency,
            round3(l.gbit_per_s),
            l.latency_us,
            l.call_us,
            l.scope,
            l.provenance,
            l.line_source,
            l.efficiency_source,
            l.latency_source
        );
    }
    let aliases: Vec<String> = ALIASES
        .iter()
        .map(|(a, n)| format!("`{a}` = `{n}`"))
        .collect();
    s += &format!("\nAliases: {}.\n", aliases.join(", "));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_names_its_sources_and_only_fitted_links_say_fitted() {
        for l in links() {
            assert!(l.gbit_per_s > 0.0 && l.latency_us >= 0.0, "{}", l.name);
            for s in [&l.line_source, &l.efficiency_source, &l.latency_source] {
                assert!(s.len() > 10, "{}: {s}", l.name);
            }
            assert_eq!(
                l.provenance == "fitted",
                l.calibrated_bytes.is_some(),
                "{}",
                l.name
            );
        }
        let n = find("nvlink4").unwrap();
        assert_eq!((n.gbit_per_s, n.latency_us, n.call_us), (2880.0, 3.4, 8.4));
        assert_eq!(n.provenance, "assumed");
        assert_eq!(find("ib100").unwrap().name, "ib-edr");
        assert_eq!(find("NVLink").unwrap().name, "nvlink4");
        let given = find("10:25").unwrap();
        assert_eq!(
            (given.gbit_per_s, given.latency_us, given.call_us),
            (10.0, 25.0, 0.0)
        );
        assert!(find("0:5").unwrap_err().contains("positive finite"));
        assert!(find("warp").unwrap_err().contains("unknown link"));
    }

    /// NCCL's cost for an 8-rank ring all-reduce of 1 MiB on NVLink 4, by hand:
    /// 8.4 + 14 x 3.4 us of latency and 2 x 7/8 x 8 Mbit at 2880 Gbit/s.
    #[test]
    fn a_ring_on_nvlink4_costs_nccls_base_and_step_latencies_and_the_bytes() {
        let m = find("nvlink4").unwrap().model();
        let bytes = 1u64 << 20;
        let want = (8.4 + 14.0 * 3.4) * 1e-6 + 2.0 * 7.0 / 8.0 * bytes as f64 * 8.0 / 2880e9;
        assert!((m.allreduce_seconds(bytes, 8) - want).abs() < 1e-12);
    }
}
