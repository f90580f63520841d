//! Which library computes the CPU products: the `gemm` crate (the default: no system
//! package, the same bits on every run and at every thread count) or a system BLAS
//! (`matmul: blas`, [`super::blas`]): MKL or OpenBLAS where they run closer to the
//! CPU's peak. Process-wide, set by a run from its config before it computes;
//! `TP_MATMUL` overrides the config for the whole process (to run any config, or the
//! test suite, on the other route), as `TP_SIMD` caps the SIMD level.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU8, Ordering};

/// The `matmul` config key.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Matmul {
    /// The `gemm` crate, candle's own CPU matmul.
    #[default]
    Gemm,
    /// A system BLAS found at run time: MKL, else OpenBLAS, or `TP_BLAS`'s.
    Blas,
}

impl Matmul {
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// 0: not set yet (the environment's or gemm), else 1 + the route.
static ROUTE: AtomicU8 = AtomicU8::new(0);

/// The route `TP_MATMUL` forces, if set; an unknown value is an error naming the
/// accepted ones.
pub fn from_env() -> Result<Option<Matmul>, String> {
    match std::env::var("TP_MATMUL") {
        Ok(v) if !v.trim().is_empty() => {
            v.trim()
                .to_ascii_lowercase()
                .parse()
                .map(Some)
                .map_err(|_| {
                    format!("TP_MATMUL={v} is not a matmul route: use gemm or blas (or unset it)")
                })
        }
        _ => Ok(None),
    }
}

/// The route a run configured with `configured` takes: `TP_MATMUL`'s if set. For
/// `blas` the library is loaded now, so that a missing one is a one-line error before
/// anything is allocated.
pub fn resolve(configured: Matmul) -> Result<Matmul, String> {
    let route = from_env()?.unwrap_or(configured);
    if route == Matmul::Blas {
        super::blas::library()?;
    }
    Ok(route)
}

/// Makes every product of this process take `route` from now on.
pub fn set(route: Matmul) {
    ROUTE.store(1 + route as u8, Ordering::Relaxed);
}

/// The route in force: the one [`set`] last, else `TP_MATMUL`'s, else gemm.
pub fn current() -> Matmul {
    match ROUTE.load(Ordering::Relaxed) {
        1 => Matmul::Gemm,
        2 => Matmul::Blas,
        _ => {
            let route = from_env().ok().flatten().unwrap_or_default();
            set(route);
            route
        }
    }
}
