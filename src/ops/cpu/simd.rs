//! The SIMD level the CPU kernels run at, chosen at run time: the best this CPU has
//! (AVX-512, else AVX2 + FMA, else plain x86-64), or a lower one named by `TP_SIMD`
//! (`avx512`, `avx2`, `scalar`), so that the fallbacks can be run and tested on a machine
//! that has more. The binary itself targets plain x86-64: every wider path is compiled
//! with `#[target_feature]` and entered only after the CPU was asked.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum SimdLevel {
    /// x86-64 baseline (SSE2).
    Scalar,
    /// AVX2 + FMA (x86-64-v3).
    Avx2,
    /// AVX-512 F/BW/VL/DQ (x86-64-v4) on top of AVX2 + FMA.
    Avx512,
}

impl SimdLevel {
    /// `scalar`, `avx2` or `avx512`, as `TP_SIMD` spells it.
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// f32 lanes of one vector register at this level.
    pub fn f32_lanes(self) -> usize {
        match self {
            SimdLevel::Scalar => 4,
            SimdLevel::Avx2 => 8,
            SimdLevel::Avx512 => 16,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" | "sse2" | "x86-64" => Some(SimdLevel::Scalar),
            "avx2" | "x86-64-v3" => Some(SimdLevel::Avx2),
            "avx512" | "avx-512" | "x86-64-v4" => Some(SimdLevel::Avx512),
            _ => None,
        }
    }
}

/// The best level this CPU supports.
pub fn detected() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return SimdLevel::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Scalar
}

/// The level `TP_SIMD` asks for (capped at what the CPU has), or the detected one. An
/// unknown value is an error naming the accepted ones.
pub fn from_env() -> Result<SimdLevel, String> {
    let best = detected();
    match std::env::var("TP_SIMD") {
        Err(_) => Ok(best),
        Ok(v) if v.trim().is_empty() => Ok(best),
        Ok(v) => match SimdLevel::parse(&v) {
            Some(asked) => Ok(asked.min(best)),
            None => Err(format!(
                "TP_SIMD={v} is not a SIMD level: use avx512, avx2 or scalar (or unset it)"
            )),
        },
    }
}

/// The level every kernel of this process runs at (read once).
pub fn level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| from_env().unwrap_or_else(|_| detected()))
}

/// Defines a kernel function compiled three times, for AVX-512, for AVX2 + FMA and for
/// plain x86-64, and called at the process's [`level`]. The body is an `#[inline(always)]`
/// function inlined into each `#[target_feature]` copy, so its plain loops are vectorised
/// for each level while the binary itself stays plain x86-64. (A closure cannot do this:
/// called from three copies it is too big to be inlined into any of them.)
macro_rules! simd_kernel {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn imp($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }
            match $crate::ops::cpu::simd::level() {
                // SAFETY: `level` never exceeds what the CPU reported.
                #[cfg(target_arch = "x86_64")]
                $crate::ops::cpu::simd::SimdLevel::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                $crate::ops::cpu::simd::SimdLevel::Avx2 => unsafe { avx2($($arg),*) },
                _ => imp($($arg),*),
            }
        }
    };
}
pub(crate) use simd_kernel;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_order_from_scalar_to_avx512() {
        assert_eq!(SimdLevel::parse("AVX2"), Some(SimdLevel::Avx2));
        assert_eq!(SimdLevel::parse("x86-64-v4"), Some(SimdLevel::Avx512));
        assert_eq!(SimdLevel::parse("neon"), None);
        assert!(SimdLevel::Scalar < SimdLevel::Avx2 && SimdLevel::Avx2 < SimdLevel::Avx512);
        assert!(level() <= detected());
    }

    /// The level in force is `TP_SIMD`'s (as test.sh sets it for its second and third
    /// passes), capped at the CPU's, else the CPU's own.
    #[test]
    fn the_level_in_force_follows_tp_simd_capped_at_the_cpu() {
        let want = match std::env::var("TP_SIMD") {
            Ok(v) if !v.trim().is_empty() => {
                SimdLevel::parse(&v).expect("valid TP_SIMD").min(detected())
            }
            _ => detected(),
        };
        assert_eq!(level(), want);
        eprintln!("SIMD level in force: {}", level().label());
    }
}
