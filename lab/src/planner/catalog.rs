//! The planner's devices as data: every peak and memory size with its source. Its links
//! are the harness's one catalogue, [`tp_harness::comm::link_catalog`].

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

/// A measured MFU to set `--mfu` by: what reached it, where, and the record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MfuReference {
    pub what: &'static str,
    pub mfu: f64,
    pub source: &'static str,
}

/// GPT-2 124M training steps measured on one H200 (batch 8 x 1024, bf16, tp 1), their
/// MFU counting 6N + 12·L·T·C FLOPs a token (attention whole, PaLM's convention) against
/// 989 TFLOP/s. Only what was measured here: published figures of other tools are not
/// in the list unless their record is (`tests/it/plan.rs` recomputes each from it).
pub const MFU_REFERENCES: [MfuReference; 4] = [
    MfuReference {
        what: "this harness (fused kernels), 39.7 ms a step",
        mfu: 0.178,
        source:
            "H200, docs/gpu-runs/2026-11-29-h200/call2-gpt2-12xt-tp1-bf16-without-flash.bench.json",
    },
    MfuReference {
        what: "PyTorch eager, 62.3 ms",
        mfu: 0.114,
        source: "H200, docs/gpu-runs/2026-11-28-h200/call2-torch-eager-bf16.json",
    },
    MfuReference {
        what: "PyTorch eager with SDPA attention, 29.2 ms",
        mfu: 0.243,
        source: "H200, docs/gpu-runs/2026-11-28-h200/call2-torch-sdpa-bf16.json",
    },
    MfuReference {
        what: "PyTorch SDPA + torch.compile, 25.5 ms",
        mfu: 0.277,
        source: "H200, docs/gpu-runs/2026-11-28-h200/call2-torch-compile-bf16.json",
    },
];
