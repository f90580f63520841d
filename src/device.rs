//! The device choice: which candle `Device` a rank computes on, and which kernels it
//! runs there.
//!
//! Every op has a portable path built from candle's differentiable ops, which runs on any
//! device candle supports. On the CPU, `kernels: fused` (the default) swaps in the fused
//! kernels with hand-written backward (`ops::fused`), each tested against the portable
//! path. A device without kernels of its own always gets the portable path.
//!
//! Nothing below `train/` names `Device::Cpu`: the device travels from here through the
//! rank context into the parameter builder, the batcher and the optimiser.

use candle_core::Device;
use serde::{Deserialize, Serialize};

/// Which implementation of the model's ops to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernels {
    /// Fused CPU kernels with hand-written backward (CPU only).
    #[default]
    Fused,
    /// candle's differentiable ops: any device, the reference for every kernel.
    Portable,
}

impl Kernels {
    /// The kernels that actually run on `device`: fused ones exist for the CPU only, so
    /// any other device gets the portable path.
    pub fn on(self, device: &Device) -> Kernels {
        match (self, device) {
            (Kernels::Fused, Device::Cpu) => Kernels::Fused,
            _ => Kernels::Portable,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kernels::Fused => "fused",
            Kernels::Portable => "portable",
        }
    }
}

/// The device a rank's model lives on. CPU builds have one; the CUDA build adds others.
pub fn rank_device() -> Device {
    Device::Cpu
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_kernels_run_on_the_cpu_and_portable_ones_stay_portable() {
        assert_eq!(Kernels::Fused.on(&Device::Cpu), Kernels::Fused);
        assert_eq!(Kernels::Portable.on(&Device::Cpu), Kernels::Portable);
    }
}
