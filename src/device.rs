//! The device choice: which candle `Device` a rank computes on, and which kernels it
//! runs there.
//!
//! Every op has a portable path built from candle's differentiable ops, which runs on any
//! device candle supports. On the CPU, `kernels: fused` (the default) swaps in the fused
//! kernels with hand-written backward (`ops::cpu::fused`), each tested against the portable
//! path. A device without kernels of its own always gets the portable path.
//!
//! `device: cuda` (the CUDA build, `scripts/build-cuda.sh`) runs the portable path on
//! candle's CUDA backend; `dtype: bf16` runs the passes in bfloat16 on either device.
//!
//! Nothing below `train/` names `Device::Cpu`: the device travels from here through the
//! rank context into the parameter builder, the batcher and the optimiser.

use candle_core::{DType, Device};
use serde::{Deserialize, Serialize};

/// Which implementation of the model's ops to run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Kernels {
    /// Fused kernels with hand-written backward: all of the model's ops on the CPU; on a
    /// GPU (CUDA build) causal attention, LayerNorm, GELU and the loss, the rest portable.
    #[default]
    Fused,
    /// candle's differentiable ops: any device, the reference for every kernel.
    Portable,
}

impl Kernels {
    /// The kernels that actually run on `device`: fused ones exist for the CPU and (in
    /// the CUDA build) for GPUs; any other device gets the portable path.
    pub fn on(self, device: &Device) -> Kernels {
        match (self, device) {
            (Kernels::Fused, Device::Cpu) => Kernels::Fused,
            (Kernels::Fused, Device::Cuda(_)) if cfg!(feature = "cuda") => Kernels::Fused,
            _ => Kernels::Portable,
        }
    }

    /// The kernels that run on `x`: the fused CPU kernels take f32 only, the GPU ones f32
    /// and bf16; anything else takes the portable path.
    pub fn for_tensor(self, x: &candle_core::Tensor) -> Kernels {
        let dtype_ok = match x.device() {
            Device::Cpu => x.dtype() == DType::F32,
            _ => matches!(x.dtype(), DType::F32 | DType::BF16),
        };
        match self.on(x.device()) {
            Kernels::Fused if dtype_ok => Kernels::Fused,
            _ => Kernels::Portable,
        }
    }

    /// Its name in configs (serde's).
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// Where the ranks compute: the `device` config key.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DeviceKind {
    #[default]
    Cpu,
    /// NVIDIA GPUs through candle's CUDA backend (the `cuda` build).
    Cuda,
}

impl DeviceKind {
    /// Its name in configs (serde's).
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Whether this binary can run on the device at all (checked before anything is
    /// allocated): `cuda` needs the CUDA build.
    pub fn check_built(self) -> anyhow::Result<()> {
        if self == DeviceKind::Cuda && !cfg!(feature = "cuda") {
            anyhow::bail!(
                "device: cuda needs the CUDA build of tp-train: build it with scripts/build-cuda.sh (this binary is CPU-only)"
            );
        }
        Ok(())
    }

    /// Opens GPU `ordinal` (ignored on the CPU). Every call makes a new candle device with
    /// its own explicit stream ([`open_cuda`]); ranks that share a GPU share one `Device`
    /// (its clones share the stream).
    pub fn open(self, ordinal: usize) -> anyhow::Result<Device> {
        self.check_built()?;
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda => open_cuda(ordinal),
        }
    }
}

/// How a GPU is opened, from the environment (read once per open; the defaults are what
/// every run uses, the switches are for measuring what they buy):
///
/// - `TP_CUDA_POOL=release` hands freed device memory back to the driver at every stream
///   synchronisation (CUDA's default); by default the stream-ordered pool keeps it, so
///   the next step does not map gigabytes again (the GPU twin of `alloc.rs`);
/// - `TP_CUDA_EVENTS=on` keeps cudarc's per-tensor event tracking; by default it is off:
///   every kernel of the device runs on its one stream, in the order the host issues it,
///   and NCCL's stream joins it explicitly (`comm/nccl.rs`), so the events would only
///   cost a record and a wait per kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaOptions {
    pub keep_freed_memory: bool,
    pub event_tracking: bool,
}

impl CudaOptions {
    /// The options `get` (an environment lookup) gives; an unknown value is an error
    /// naming the variable and its values.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let pick = |var: &str, default: bool, yes: &str, no: &str| match get(var).as_deref() {
            None | Some("") => Ok(default),
            Some(v) if v == yes => Ok(true),
            Some(v) if v == no => Ok(false),
            Some(v) => Err(crate::error::user(format!(
                "{var}={v} is not one of {yes}, {no}: unset it for the default"
            ))),
        };
        Ok(Self {
            keep_freed_memory: pick("TP_CUDA_POOL", true, "keep", "release")?,
            event_tracking: pick("TP_CUDA_EVENTS", false, "on", "off")?,
        })
    }
}

/// The GPU paths written after the last GPU run, each of which `TP_CUDA_OFF` (a comma
/// list of their names) turns back to what it replaced: to measure what each one buys
/// (`gpu-check.sh follow`), and to work round one that fails on a GPU without a rebuild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaPath {
    /// Attention on the tensor cores without the scores (`ops::cuda::flash_attention`; bf16,
    /// head size 64, T a multiple of 64), where the scores do not fit; off: the scalar
    /// kernel that never holds them either.
    FlashAttention,
    /// Attention reading the packed qkv in place (`ops::cuda::packed_attention`); off:
    /// the heads split and merged by copies.
    PackedAttention,
    /// The gradient norm in two kernels a group (`ops::cuda::sumsq`); off: four candle
    /// ops a tensor.
    GradNorm,
    /// The embedding's backward from bucketed ids; off: each row's warp scans all ids.
    EmbeddingBuckets,
    /// The MLP's bias and GELU in one kernel; off: the bias kernel, then the GELU's.
    BiasGelu,
    /// The cross-entropy's backward in one pass; off: it recomputes each row's max and sum.
    CeOnePass,
    /// The packed attention's products one cuBLAS batch each over every sequence's every
    /// head (`ops::head_gemms`); off: one strided batch a sequence, over its heads.
    BatchedHeads,
    /// LayerNorm's weight partials summed in registers, written once; off: summed in
    /// the partial's global memory row by row.
    LnRegisterSums,
}

impl CudaPath {
    pub const ALL: [CudaPath; 8] = [
        CudaPath::FlashAttention,
        CudaPath::PackedAttention,
        CudaPath::GradNorm,
        CudaPath::EmbeddingBuckets,
        CudaPath::BiasGelu,
        CudaPath::CeOnePass,
        CudaPath::BatchedHeads,
        CudaPath::LnRegisterSums,
    ];

    /// Its name in `TP_CUDA_OFF`.
    pub fn name(self) -> &'static str {
        match self {
            CudaPath::FlashAttention => "flash-attention",
            CudaPath::PackedAttention => "packed-attention",
            CudaPath::GradNorm => "grad-norm",
            CudaPath::EmbeddingBuckets => "embedding-buckets",
            CudaPath::BiasGelu => "bias-gelu",
            CudaPath::CeOnePass => "ce-one-pass",
            CudaPath::BatchedHeads => "batched-heads",
            CudaPath::LnRegisterSums => "ln-register-sums",
        }
    }
}

/// The paths a `TP_CUDA_OFF` value turns off (none for no value); an unknown name is an
/// error naming the known ones.
pub fn cuda_paths_off(value: Option<&str>) -> anyhow::Result<Vec<CudaPath>> {
    let mut off = Vec::new();
    for name in value
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let Some(p) = CudaPath::ALL.into_iter().find(|p| p.name() == name) else {
            let known: Vec<&str> = CudaPath::ALL.iter().map(|p| p.name()).collect();
            return Err(crate::error::user(format!(
                "TP_CUDA_OFF names {name}, not one of {}: fix or unset it",
                known.join(", ")
            )));
        };
        off.push(p);
    }
    Ok(off)
}

/// Whether `path` runs: not named by `TP_CUDA_OFF` (read once a process; a GPU's open
/// refuses an unknown name before anything runs).
pub fn cuda_path_on(path: CudaPath) -> bool {
    static OFF: std::sync::OnceLock<Vec<CudaPath>> = std::sync::OnceLock::new();
    let off = OFF.get_or_init(|| {
        cuda_paths_off(std::env::var("TP_CUDA_OFF").ok().as_deref()).unwrap_or_default()
    });
    !off.contains(&path)
}

/// Opens GPU `ordinal` with **one explicit stream** that every thread computing on it
/// shares: the rank threads, and their communication threads (ladders, gradient
/// buckets). candle's `Device::new_cuda` would give each host thread CUDA's per-thread
/// default stream, on which a rank's kernels run unordered against another rank's — a
/// thread all-reduce would read tensors still being written, a tensor dropped on another
/// thread could be freed under a kernel, and a synchronisation would wait for the
/// caller's own work only. On one stream the GPU runs the kernels in the order the host
/// issues them, and the thread collectives' barriers already order the issues.
#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> anyhow::Result<Device> {
    let n = gpu_count()?;
    if ordinal >= n {
        anyhow::bail!(
            "GPU {ordinal} requested but this machine has {n}: run fewer ranks per machine"
        );
    }
    let options = CudaOptions::from_env(|v| std::env::var(v).ok())?;
    cuda_paths_off(std::env::var("TP_CUDA_OFF").ok().as_deref())?;
    let failed = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!("could not open GPU {ordinal} ({e}): check nvidia-smi and the CUDA driver")
    };
    let device = Device::new_cuda_with_stream(ordinal).map_err(|e| failed(&e))?;
    let cuda = device.as_cuda_device().map_err(|e| failed(&e))?;
    if !options.event_tracking {
        // SAFETY: called before any tensor of this device exists; every kernel of the
        // device runs on its one stream, and NCCL's stream waits for it and is waited for
        // by it explicitly (comm/nccl.rs), which is what the tracking would ensure.
        unsafe { cuda.disable_event_tracking() };
    }
    if options.keep_freed_memory {
        keep_freed_memory(&cuda.cuda_stream()).map_err(|e| failed(&e))?;
    }
    Ok(device)
}

/// The device's stream-ordered memory pool keeps what is freed, however much, instead of
/// handing it back at each synchronisation (release threshold: unlimited).
#[cfg(feature = "cuda")]
fn keep_freed_memory(
    stream: &candle_core::cuda_backend::cudarc::driver::CudaStream,
) -> anyhow::Result<()> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let dev = stream.context().cu_device();
    let mut threshold: u64 = u64::MAX;
    // SAFETY: `dev` is the context's own device; the release threshold is a u64.
    unsafe {
        let pool = result::device::get_default_mem_pool(dev)?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )?;
    }
    Ok(())
}

/// What an opened GPU is, for its test: whether its stream is an explicit one (not the
/// legacy or per-thread default), whether cudarc tracks events, and the pool's release
/// threshold.
#[cfg(feature = "cuda")]
pub fn cuda_setup(device: &Device) -> anyhow::Result<(bool, bool, u64)> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let cuda = device.as_cuda_device()?;
    let stream = cuda.cuda_stream();
    // CU_STREAM_LEGACY is 0x1, CU_STREAM_PER_THREAD 0x2, the NULL stream 0.
    let raw = stream.cu_stream() as usize;
    let explicit = raw > 2;
    let mut threshold: u64 = 0;
    // SAFETY: as in keep_freed_memory.
    unsafe {
        let pool = result::device::get_default_mem_pool(stream.context().cu_device())?;
        result::mem_pool::get_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )?;
    }
    Ok((explicit, cuda.is_event_tracking(), threshold))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_ordinal: usize) -> anyhow::Result<Device> {
    unreachable!("check_built refuses cuda in a CPU build")
}

/// TF32 tensor-core matmuls for f32 on GPUs (process-wide, candle's switch): faster, with
/// 10-bit mantissas in the products. Off unless the `tf32` config key turns it on; the
/// equivalence tests keep it off. No effect on the CPU.
pub fn set_tf32(on: bool) {
    #[cfg(feature = "cuda")]
    candle_core::cuda_backend::set_gemm_reduced_precision_f32(on);
    #[cfg(not(feature = "cuda"))]
    let _ = on;
}

/// The name the driver gives GPU `ordinal` ("NVIDIA H100 80GB HBM3"); `None` in a CPU
/// build or where the driver does not answer.
pub fn gpu_name(ordinal: usize) -> Option<String> {
    #[cfg(feature = "cuda")]
    return driver_device(ordinal)
        .and_then(|d| candle_core::cuda_backend::cudarc::driver::result::device::get_name(d).ok());
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        None
    }
}

/// GPU `ordinal`'s memory in bytes; `None` in a CPU build or where the driver does not
/// answer.
pub fn gpu_memory(ordinal: usize) -> Option<u64> {
    #[cfg(feature = "cuda")]
    return driver_device(ordinal).and_then(|d| {
        // SAFETY: `d` is a device the driver just returned.
        unsafe { candle_core::cuda_backend::cudarc::driver::result::device::total_mem(d) }
            .ok()
            .map(|b| b as u64)
    });
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        None
    }
}

/// The driver's handle of GPU `ordinal` (the driver initialised first), for the
/// queries above.
#[cfg(feature = "cuda")]
fn driver_device(
    ordinal: usize,
) -> Option<candle_core::cuda_backend::cudarc::driver::sys::CUdevice> {
    use candle_core::cuda_backend::cudarc::driver::result;
    result::init().ok()?;
    result::device::get(i32::try_from(ordinal).ok()?).ok()
}

/// GPUs the driver reports (0 in a CPU build).
pub fn gpu_count() -> anyhow::Result<usize> {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::CudaContext;
        CudaContext::device_count().map(|n| n as usize).map_err(|e| {
            anyhow::anyhow!("the CUDA driver did not answer ({e:?}): is this a GPU machine with libcuda.so.1 on the library path?")
        })
    }
    #[cfg(not(feature = "cuda"))]
    Ok(0)
}

/// The precision of the forward and backward passes: the `dtype` config key. Master
/// weights, gradients, AdamW moments and the loss stay f32 either way.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ComputeDtype {
    #[default]
    F32,
    /// bfloat16 matmuls and activations; norms, softmax and the loss computed in f32.
    Bf16,
}

impl ComputeDtype {
    pub fn dtype(self) -> DType {
        match self {
            ComputeDtype::F32 => DType::F32,
            ComputeDtype::Bf16 => DType::BF16,
        }
    }

    /// Its name in configs (serde's).
    pub fn label(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tp_cuda_off_names_paths_and_refuses_an_unknown_one_naming_the_known() {
        assert_eq!(cuda_paths_off(None).unwrap(), []);
        assert_eq!(cuda_paths_off(Some("")).unwrap(), []);
        assert_eq!(
            cuda_paths_off(Some("grad-norm, packed-attention")).unwrap(),
            [CudaPath::GradNorm, CudaPath::PackedAttention]
        );
        let all: Vec<&str> = CudaPath::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(cuda_paths_off(Some(&all.join(","))).unwrap(), CudaPath::ALL);
        let e = cuda_paths_off(Some("grad-norm,flash"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TP_CUDA_OFF names flash, not one of flash-attention, packed-attention"),
            "{e}"
        );
    }

    #[test]
    fn config_enum_labels_are_serdes_names() {
        let names = |v: serde_json::Value| v.as_str().unwrap().to_string();
        for k in [Kernels::Fused, Kernels::Portable] {
            assert_eq!(names(serde_json::to_value(k).unwrap()), k.label());
        }
        for d in [DeviceKind::Cpu, DeviceKind::Cuda] {
            assert_eq!(names(serde_json::to_value(d).unwrap()), d.label());
        }
        for d in [ComputeDtype::F32, ComputeDtype::Bf16] {
            assert_eq!(names(serde_json::to_value(d).unwrap()), d.label());
        }
        assert_eq!(ComputeDtype::Bf16.label(), "bf16");
    }

    #[test]
    fn fused_kernels_run_on_the_cpu_and_portable_ones_stay_portable() {
        assert_eq!(Kernels::Fused.on(&Device::Cpu), Kernels::Fused);
        assert_eq!(Kernels::Portable.on(&Device::Cpu), Kernels::Portable);
    }

    #[test]
    fn bf16_tensors_take_the_portable_path() {
        let x = candle_core::Tensor::zeros(4, DType::BF16, &Device::Cpu).unwrap();
        assert_eq!(Kernels::Fused.for_tensor(&x), Kernels::Portable);
        let x = x.to_dtype(DType::F32).unwrap();
        assert_eq!(Kernels::Fused.for_tensor(&x), Kernels::Fused);
    }

    /// The GPU's defaults keep freed memory and leave event tracking off; each switch
    /// flips one, and a value it does not know is one line naming the variable.
    #[test]
    fn cuda_options_default_to_a_kept_pool_without_event_tracking_and_switch_by_env() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
        };
        let d = CudaOptions::from_env(env(&[])).unwrap();
        assert_eq!(
            d,
            CudaOptions {
                keep_freed_memory: true,
                event_tracking: false
            }
        );
        let o = CudaOptions::from_env(env(&[
            ("TP_CUDA_POOL", "release"),
            ("TP_CUDA_EVENTS", "on"),
        ]))
        .unwrap();
        assert!(!o.keep_freed_memory && o.event_tracking);
        let e = CudaOptions::from_env(env(&[("TP_CUDA_POOL", "big")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TP_CUDA_POOL=big is not one of keep, release"),
            "{e}"
        );
    }

    #[test]
    fn cuda_in_a_cpu_build_is_one_line_naming_the_build_script() {
        if cfg!(feature = "cuda") {
            return;
        }
        let e = DeviceKind::Cuda.open(0).unwrap_err().to_string();
        assert!(e.contains("scripts/build-cuda.sh"), "{e}");
        assert!(!e.contains('\n'));
        assert!(matches!(DeviceKind::Cpu.open(3).unwrap(), Device::Cpu));
    }
}
