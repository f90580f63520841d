//! `s` and `p` compute blocks.md's formulas: at tp 2 and 4, with and without biases, the
//! loss, every parameter gradient and the input gradient equal a single-process reference
//! that writes every rank's path out literally in one autograd graph. Patterns cover
//! p-runs of length 1 and 3, and mixes with `t`.

use crate::common::checks::{self, On};
use crate::common::*;
use tp_harness::device::Kernels;

fn check_against_literal(pattern: &str, tp: usize, bias: bool) {
    checks::check_against_literal(pattern, tp, bias, &On::cpu(Kernels::Fused));
}

fn all(pattern: &str) {
    for tp in [2, 4] {
        for bias in [true, false] {
            check_against_literal(pattern, tp, bias);
        }
    }
}

#[test]
fn tpst_with_a_p_run_of_length_one_matches_literal_blocks_md() {
    all("tpst");
}

#[test]
fn sppp_with_a_p_run_of_length_three_matches_literal_blocks_md() {
    all("sppp");
}

#[test]
fn pspp_with_runs_of_length_one_and_two_matches_literal_blocks_md() {
    all("pspp");
}

#[test]
fn ssss_and_pppp_match_literal_blocks_md() {
    all("ssss");
    all("pppp");
}

#[test]
fn the_literal_reference_differs_from_dense_gpt2_for_s_and_p_at_tp2() {
    // Guards the reference itself: if it collapsed to the dense model, the tests above
    // would not prove anything about s and p.
    let cfg = small_config(4, true);
    let source = RandomWeights { seed: 11 };
    let (idx, tgt) = batch(5, 3, 16, cfg.vocab_size);
    let vars = logical_vars(&param_specs(&cfg, "sppp"), &source);
    let lit = literal::loss(&vars, &cfg, "sppp", 2, &idx, &tgt)
        .to_scalar::<f32>()
        .unwrap();
    let den = dense::loss(&vars, &cfg, &idx, &tgt)
        .to_scalar::<f32>()
        .unwrap();
    assert!((lit - den).abs() > 1e-3, "literal {lit} vs dense {den}");
}

#[test]
fn s_and_p_on_the_portable_path_match_literal_blocks_md() {
    for pattern in ["tpst", "sppp", "pspp", "ssss", "pppp"] {
        for tp in [2, 4] {
            for bias in [true, false] {
                checks::check_against_literal(pattern, tp, bias, &On::cpu(Kernels::Portable));
            }
        }
    }
}

#[test]
fn s_and_p_in_bf16_stay_within_bf16_rounding_of_literal_blocks_md() {
    let on = On {
        dtype: tp_harness::device::ComputeDtype::Bf16,
        loss_tol: 1e-2,
        grad_tol: 5e-2,
        ..On::cpu(Kernels::Fused)
    };
    for pattern in ["sppp", "tpst"] {
        checks::check_against_literal(pattern, 2, true, &on);
    }
}
