//! The device choice: which candle `Device` a rank computes on, and which kernels it
//! runs there.
//!
//! Every op has a portable path built from candle's differentiable ops, which runs on any
//! device candle supports. On the CPU, `kernels: fused` (the default) swaps in the fused
//! kernels with hand-written backward (`ops::fused`), each tested against the portable
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
    /// GPU (CUDA build) causal attention, the rest portable.
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
    /// its own stream; ranks that must share device memory share one `Device`.
    pub fn open(self, ordinal: usize) -> anyhow::Result<Device> {
        self.check_built()?;
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda => open_cuda(ordinal),
        }
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> anyhow::Result<Device> {
    let n = gpu_count()?;
    if ordinal >= n {
        anyhow::bail!(
            "GPU {ordinal} requested but this machine has {n}: run fewer ranks per machine"
        );
    }
    Device::new_cuda(ordinal).map_err(|e| {
        anyhow::anyhow!("could not open GPU {ordinal} ({e}): check nvidia-smi and the CUDA driver")
    })
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
