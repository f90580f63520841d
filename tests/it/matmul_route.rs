//! `matmul: blas`: a run whose products a system BLAS computes trains as the gemm route
//! does, gives the same bits run to run, names the library in its records, and a BLAS
//! that cannot be found is one line before anything is written.
//!
//! scripts/test.sh installs Debian's OpenBLAS for these tests and sets
//! `TP_TEST_BLAS=required`; elsewhere, without a BLAS on the machine, they say they
//! skipped.

use crate::common::{bin, scratch};

/// Whether this machine has a BLAS the run finds (`TP_BLAS` or the usual names); panics
/// where the test script requires one.
fn blas_here() -> bool {
    match tp_harness::ops::cpu::gemm::blas::library() {
        Ok(_) => true,
        Err(e) if std::env::var("TP_TEST_BLAS").as_deref() == Ok("required") => {
            panic!("TP_TEST_BLAS=required but {e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

const RUN: [&str; 18] = [
    "--preset",
    "mini",
    "--tp",
    "2",
    "--set",
    "max_iters=12",
    "--set",
    "eval_interval=6",
    "--set",
    "eval_iters=2",
    "--set",
    "batch_size=4",
    "--set",
    "checkpoint_interval=0",
    "--set",
    "log_interval=1",
    "--quiet",
    "--out",
];

/// The `(step, train loss)` pairs of a run's log.
fn losses(dir: &std::path::Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(dir.join("log.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((v["step"].as_u64()?, v["train_loss"].as_f64()?))
        })
        .collect()
}

fn train(d: &std::path::Path, out: &str, matmul: &str) {
    let arg = format!("matmul={matmul}");
    let args: Vec<&str> = RUN.iter().copied().chain([out, "--set", &arg]).collect();
    // The route is the config's: TP_MATMUL, which would override it, is cleared.
    let o = bin("tp-train", d, &args, &[("TP_MATMUL", "")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn blas_route_trains_as_gemm_does_repeats_its_bits_and_names_its_library() {
    if !blas_here() {
        return;
    }
    let d = scratch("matmul-route");
    train(&d, "gemm", "gemm");
    train(&d, "blas", "blas");
    train(&d, "blas-again", "blas");
    let (g, b, again) = (
        losses(&d.join("gemm")),
        losses(&d.join("blas")),
        losses(&d.join("blas-again")),
    );
    assert!(g.len() >= 12 && g.len() == b.len(), "{g:?} {b:?}");
    // The same bits run to run at one thread count (MKL in its strict reproducible
    // mode; OpenBLAS's kernels are fixed-order).
    assert_eq!(b, again, "a BLAS run repeated gave other losses");
    // Another library sums in another order: the same training within float noise.
    for ((s, x), (_, y)) in g.iter().zip(&b) {
        assert!(
            (x - y).abs() < 2e-3 * x.abs(),
            "step {s}: gemm {x}, blas {y}"
        );
    }
    // (OpenBLAS may give gemm's very bits: both sum each product over the inner
    // dimension in order. That the route was taken is ops::cpu::gemm's unit test.)
    let summary = std::fs::read_to_string(d.join("blas/summary.json")).unwrap();
    let machine: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let machine = machine["machine"].as_str().unwrap();
    let lib = &tp_harness::ops::cpu::gemm::blas::library().unwrap().name;
    assert!(
        machine.contains(&format!("matmuls by {lib}")) && machine.ends_with(" kernels"),
        "{machine}"
    );
    let config = std::fs::read_to_string(d.join("blas/config.yaml")).unwrap();
    assert!(config.contains("matmul: blas"), "{config}");
}

#[test]
fn a_blas_that_cannot_be_loaded_is_one_line_exit_2_before_anything_is_written() {
    let d = scratch("matmul-route-missing");
    let args: Vec<&str> = RUN
        .iter()
        .copied()
        .chain(["run", "--set", "matmul=blas"])
        .collect();
    let o = bin(
        "tp-train",
        &d,
        &args,
        &[("TP_BLAS", "/nonexistent/libnoblas.so"), ("TP_MATMUL", "")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("TP_BLAS=/nonexistent/libnoblas.so") && err.contains("unset it"),
        "{err}"
    );
    assert!(!d.join("run").exists(), "a run directory was written");
    // An unknown route in the environment: the same kind of line.
    let o = bin("tp-train", &d, &args, &[("TP_MATMUL", "mkl")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("TP_MATMUL=mkl") && err.contains("gemm or blas"),
        "{err}"
    );
}
