//! The machine label the runs a test starts write (summary.json's `machine`).

/// How the runs this test starts label their machine, up to the kernels' level: the
/// CPU, then the BLAS where `TP_MATMUL=blas` (the test script's rerun) has one compute
/// the products: `"<cpu>, fused "` or `"<cpu>, matmuls by <library>, fused "`.
pub fn machine_here() -> String {
    use tp_harness::ops::cpu::gemm::route::{self, Matmul};
    let cpu = tp_harness::util::host::cpu();
    match route::from_env() {
        Ok(Some(Matmul::Blas)) => format!(
            "{cpu}, matmuls by {}, fused ",
            tp_harness::ops::cpu::gemm::blas::library().map_or("?".into(), |b| b.name.clone())
        ),
        _ => format!("{cpu}, fused "),
    }
}
