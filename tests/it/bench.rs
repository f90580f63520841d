//! `tp-train --bench`: what bench.json holds and the table prints.

use crate::common::{scratch, tp_train};

#[test]
fn bench_writes_bench_json_whose_profile_accounts_for_the_step_and_whose_flops_match_the_model() {
    let d = scratch("bench");
    let out = tp_train(
        &d,
        &[
            "--bench",
            "--preset",
            "mini",
            "--pattern",
            "tttt",
            "--tp",
            "1",
            "--bench-warmup",
            "1",
            "--bench-steps",
            "3",
            "--out",
            "b",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("b/bench.json")).unwrap()).unwrap();
    let ms = j["ms_per_step"].as_f64().unwrap();
    let (b, t) = (12.0, 64.0);
    assert!(ms > 0.0);
    assert!(
        (j["tokens_per_s"].as_f64().unwrap() - b * t / (ms / 1e3)).abs()
            < 1e-6 * b * t / (ms / 1e3)
    );
    // mini: 4 layers, C 128, 4 heads of 32, vocab 65. Linears 12 C^2 a token a layer plus
    // the tied head; attention 2 T x T x hd products a head. Backward: 2x the linears,
    // 2.5x attention (it recomputes the probabilities).
    let (n, c, v, l) = (b * t, 128.0, 65.0, 4.0);
    let linear = 2.0 * n * (12.0 * c * c * l + c * v);
    let attention = 4.0 * b * 4.0 * t * t * 32.0 * l;
    let want = 3.0 * linear + 3.5 * attention;
    let got = j["flops_per_step"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-9 * want, "flops {got} vs {want}");
    let profile = j["profile"].as_array().unwrap();
    let names: Vec<&str> = profile.iter().map(|p| p["op"].as_str().unwrap()).collect();
    for op in [
        "matmul forward",
        "matmul backward",
        "attention forward",
        "attention backward",
        "layernorm forward",
        "gelu backward",
        "softmax + cross-entropy",
        "AdamW",
        "communication",
        "other",
    ] {
        assert!(names.contains(&op), "{op} missing from {names:?}");
    }
    let shares: f64 = profile.iter().map(|p| p["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "shares sum to {shares}");
    let timed_ops: f64 = profile[..10]
        .iter()
        .map(|p| p["ms"].as_f64().unwrap())
        .sum();
    // The profile's entries are means over the measured steps and add up to the mean
    // step (the median, `ms`, leaves a slow step out, so it is no bound on them).
    let mean_ms: f64 = profile.iter().map(|p| p["ms"].as_f64().unwrap()).sum();
    assert!(
        timed_ops > 0.0 && timed_ops < 1.2 * mean_ms,
        "timed ops {timed_ops} of a mean {mean_ms} ms step"
    );
    assert!(j["matmul_ceiling_gflops_per_core"].as_f64().unwrap() > 0.0);
    // Each phase's rate is its own FLOPs over its own time: forward the linears and
    // attention once, backward twice the linears and 2.5x attention.
    let threads = j["math_threads_per_rank"].as_f64().unwrap();
    let phase_flops = |phase: &str| {
        let rate = j[format!("{phase}_gflops_per_core")].as_f64().unwrap();
        rate * 1e9 * j[format!("{phase}_ms")].as_f64().unwrap() / 1e3 * threads
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
    assert!(close(phase_flops("forward"), linear + attention));
    assert!(close(
        phase_flops("backward"),
        2.0 * linear + 2.5 * attention
    ));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("of peak") && printed.contains("by phase: forward"),
        "{printed}"
    );
    if cfg!(target_os = "linux") {
        assert!(j["peak_rss_mb"].as_f64().unwrap() > 1.0);
    }
}
