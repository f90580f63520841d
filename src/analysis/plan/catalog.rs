//! The planner's links and devices as data: every number with its unit and its source,
//! latency and bandwidth kept apart. Bandwidths are Gbit/s per direction for one GPU's
//! (or one host's) share of the link, as the ring model takes them; a datasheet's
//! "total" NVLink figure counts both directions and is halved here.

use crate::comm::LinkModel;

/// A link the planner prices collectives on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanLink {
    pub name: String,
    pub label: String,
    pub gbit_per_s: f64,
    /// One ring step's latency (a message), microseconds.
    pub latency_us: f64,
    /// Whom the bandwidth belongs to: `per GPU`, `per NIC (one per GPU)`, `per host`.
    pub scope: String,
    pub bandwidth_source: String,
    pub latency_source: String,
    /// The message sizes (bytes) within which the model was checked against this link;
    /// `None`: never checked here (datasheet bandwidth, assumed latency).
    pub calibrated_bytes: Option<(f64, f64)>,
}

impl PlanLink {
    pub fn model(&self) -> LinkModel {
        LinkModel {
            gbit_per_s: self.gbit_per_s,
            latency_us: self.latency_us,
        }
    }

    /// Why a message of `bytes` on this link is priced without evidence, if it is.
    pub fn flag(&self, bytes: f64) -> Option<String> {
        match self.calibrated_bytes {
            None => Some(format!(
                "{}: not calibrated (datasheet bandwidth, assumed latency)",
                self.name
            )),
            Some((lo, hi)) if bytes < lo || bytes > hi => Some(format!(
                "{}: a {:.0} KiB message lies outside its calibrated {:.0}-{:.0} KiB",
                self.name,
                bytes / 1024.0,
                lo / 1024.0,
                hi / 1024.0
            )),
            _ => None,
        }
    }
}

/// The NVLink latency: a ring step of NCCL's all-reduce fitted to a measured 8 x A100
/// all-reduce of 1 MiB taking 92.8 us (issue 49's figure; 14 ring steps, the bandwidth
/// part 6 us), where presets of one latency per call say 8-19 us.
const NVLINK_LATENCY: &str =
    "fitted: a measured 8 x A100 1 MiB all-reduce of 92.8 us over 14 ring steps";
const RDMA_LATENCY: &str = "assumed: RDMA small-message latency plus NCCL's per-step cost";

fn link(
    name: &str,
    label: &str,
    gbit: f64,
    us: f64,
    scope: &str,
    bandwidth_source: &str,
    latency_source: &str,
) -> PlanLink {
    PlanLink {
        name: name.into(),
        label: label.into(),
        gbit_per_s: gbit,
        latency_us: us,
        scope: scope.into(),
        bandwidth_source: bandwidth_source.into(),
        latency_source: latency_source.into(),
        calibrated_bytes: None,
    }
}

/// The vendors' links: (name, label, Gbit/s a direction, us a message, scope,
/// bandwidth's source, latency's source).
type Row = (
    &'static str,
    &'static str,
    f64,
    f64,
    &'static str,
    &'static str,
    &'static str,
);
const GPU: &str = "per GPU";
const NIC: &str = "per NIC (one per GPU)";
const HOST: &str = "per host";
const ETHERNET: &str = "assumed: TCP small-message latency (the study's 50 us for 1 GbE)";
const IEEE: &str = "IEEE 802.3 nominal rate";
const VENDOR_LINKS: [Row; 11] = [
    (
        "nvlink3",
        "NVLink 3 (A100)",
        2400.0,
        6.0,
        GPU,
        "NVIDIA A100 datasheet: 600 GB/s total, 300 GB/s a direction",
        NVLINK_LATENCY,
    ),
    (
        "nvlink4",
        "NVLink 4 (H100)",
        3600.0,
        6.0,
        GPU,
        "NVIDIA H100 datasheet: 900 GB/s total, 450 GB/s a direction",
        NVLINK_LATENCY,
    ),
    (
        "nvlink5",
        "NVLink 5 (B200)",
        7200.0,
        6.0,
        GPU,
        "NVIDIA B200 datasheet: 1.8 TB/s total, 900 GB/s a direction",
        NVLINK_LATENCY,
    ),
    (
        "ib-hdr",
        "InfiniBand HDR",
        200.0,
        5.0,
        NIC,
        "IBTA HDR: 200 Gbit/s a port (ConnectX-6)",
        RDMA_LATENCY,
    ),
    (
        "ib-ndr",
        "InfiniBand NDR",
        400.0,
        5.0,
        NIC,
        "IBTA NDR: 400 Gbit/s a port (ConnectX-7)",
        RDMA_LATENCY,
    ),
    (
        "ib-xdr",
        "InfiniBand XDR",
        800.0,
        5.0,
        NIC,
        "IBTA XDR: 800 Gbit/s a port (ConnectX-8)",
        RDMA_LATENCY,
    ),
    (
        "100gbe",
        "100 GbE (RoCE)",
        100.0,
        10.0,
        NIC,
        IEEE,
        RDMA_LATENCY,
    ),
    (
        "200gbe",
        "200 GbE (RoCE)",
        200.0,
        10.0,
        NIC,
        IEEE,
        RDMA_LATENCY,
    ),
    (
        "400gbe",
        "400 GbE (RoCE)",
        400.0,
        10.0,
        NIC,
        IEEE,
        RDMA_LATENCY,
    ),
    ("10gbe", "10 GbE (TCP)", 10.0, 25.0, HOST, IEEE, ETHERNET),
    ("1gbe", "1 GbE (TCP)", 1.0, 50.0, HOST, IEEE, ETHERNET),
];

/// Every named link: the vendors', then the harness's own calibrated ones.
pub fn links() -> Vec<PlanLink> {
    let mut v: Vec<PlanLink> = VENDOR_LINKS
        .iter()
        .map(|&(name, label, gbit, us, scope, bw, lat)| link(name, label, gbit, us, scope, bw, lat))
        .collect();
    // The harness's own links, fitted to shaped TCP between namespace hosts
    // (docs/links.md: 96% of the rate, 8 us a message, within 1% over 20 cells of mini's
    // 384 KiB all-reduces at 0.1-1 Gbit/s).
    for (gbit, name) in [(1.0, "ns-1gbit"), (0.1, "ns-100mbit")] {
        let mut l = link(
            name,
            &format!("shaped TCP between namespace hosts, {gbit} Gbit/s"),
            0.96 * gbit,
            8.0,
            HOST,
            "fitted: docs/links.md, 96% of the shaped rate",
            "fitted: docs/links.md, 8 us a message",
        );
        l.calibrated_bytes = Some((96.0 * 1024.0, 1536.0 * 1024.0));
        v.push(l);
    }
    v
}

/// A link by name, or `GBIT:US` for one of the user's own (uncalibrated).
pub fn find_link(spec: &str) -> Result<PlanLink, String> {
    if let Some(l) = links().into_iter().find(|l| l.name == spec) {
        return Ok(l);
    }
    if let Some((g, us)) = spec.split_once(':') {
        if let (Ok(g), Ok(us)) = (g.parse::<f64>(), us.parse::<f64>()) {
            // Numbers, but out of range: say which, not "unknown link".
            if !(g > 0.0 && g.is_finite()) {
                return Err(format!(
                    "link `{spec}`: its bandwidth {g} Gbit/s must be a positive finite number (e.g. 100:5)"
                ));
            }
            if !(us >= 0.0 && us.is_finite()) {
                return Err(format!(
                    "link `{spec}`: its latency {us} us must be zero or a positive finite number of microseconds (e.g. 100:5)"
                ));
            }
            return Ok(link(
                spec,
                &format!("{g} Gbit/s, {us} us a message"),
                g,
                us,
                "as given",
                "given",
                "given",
            ));
        }
    }
    let names: Vec<String> = links().into_iter().map(|l| l.name).collect();
    Err(format!(
        "unknown link `{spec}`: name one of {} or give GBIT:US (e.g. 100:5)",
        names.join(", ")
    ))
}

/// A GPU by its dense peaks: bf16 (what the planner uses), and TF32 and plain f32 where
/// the datasheet gives them (what `--bench` on a GPU holds an f32 run to).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Gpu {
    pub name: &'static str,
    pub bf16_tflops: f64,
    pub tf32_tflops: Option<f64>,
    pub f32_tflops: Option<f64>,
    pub source: &'static str,
    /// Its memory, GB (10^9 bytes) as the datasheet gives it, and that datasheet.
    pub memory_gb: f64,
    pub memory_source: &'static str,
}

pub const GPUS: [Gpu; 4] = [
    Gpu {
        name: "a100",
        bf16_tflops: 312.0,
        tf32_tflops: Some(156.0),
        f32_tflops: Some(19.5),
        source: "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense (624 with sparsity), TF32 156, FP32 19.5",
        memory_gb: 80.0,
        memory_source: "NVIDIA A100 datasheet: 80 GB HBM2e (the 80 GB part)",
    },
    Gpu {
        name: "h100",
        bf16_tflops: 989.0,
        tf32_tflops: Some(494.7),
        f32_tflops: Some(66.9),
        source: "NVIDIA H100 SXM datasheet: 989 TFLOPS bf16 dense (1979 with sparsity), TF32 494.7, FP32 66.9",
        memory_gb: 80.0,
        memory_source: "NVIDIA H100 SXM datasheet: 80 GB HBM3",
    },
    Gpu {
        name: "h200",
        bf16_tflops: 989.0,
        tf32_tflops: Some(494.7),
        f32_tflops: Some(66.9),
        source: "NVIDIA H200 datasheet: 989 TFLOPS bf16 dense, TF32 494.7, FP32 66.9, as H100",
        memory_gb: 141.0,
        memory_source: "NVIDIA H200 datasheet: 141 GB HBM3e",
    },
    Gpu {
        name: "b200",
        bf16_tflops: 2250.0,
        tf32_tflops: None,
        f32_tflops: None,
        source: "NVIDIA B200 datasheet: 2.25 PFLOPS bf16 dense (4.5 with sparsity)",
        memory_gb: 180.0,
        memory_source: "NVIDIA DGX B200 datasheet: 1,440 GB across 8 GPUs, 180 GB each",
    },
];

/// The catalogue's entry for a GPU as the driver names it ("NVIDIA H100 80GB HBM3"):
/// the SXM parts the peaks are for; a PCIe or NVL part (lower clocks and power) has none.
pub fn gpu_named(driver_name: &str) -> Option<&'static Gpu> {
    let n = driver_name.to_ascii_lowercase();
    if n.contains("pcie") || n.contains("nvl") {
        return None;
    }
    GPUS.iter().find(|g| n.contains(g.name))
}
