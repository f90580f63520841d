//! `l` computes blocks.md's ladder: pending sums handed from block to block and joined
//! where a run ends. An `l`-only model gives the same loss and every gradient at tp 1, 2
//! and 4 (the literal reference is one function for every tp); runs of `l` entered from
//! and left into `t`, `s` and `p` blocks equal the literal reading at tp 2 and 4.

use crate::common::checks::{self, On};
use crate::common::*;
use tp_harness::device::Kernels;

fn all(pattern: &str, tps: &[usize], kernels: Kernels) {
    for &tp in tps {
        for bias in [true, false] {
            checks::check_against_literal(pattern, tp, bias, &On::cpu(kernels));
        }
    }
}

#[test]
fn llll_matches_literal_blocks_md_at_tp_1_2_and_4() {
    all("llll", &[1, 2, 4], Kernels::Fused);
}

#[test]
fn ladder_runs_between_t_s_and_p_blocks_match_literal_blocks_md() {
    for pattern in ["tllp", "lsll", "plt", "ltl"] {
        all(pattern, &[2, 4], Kernels::Fused);
    }
}

#[test]
fn ladder_blocks_on_the_portable_path_match_literal_blocks_md() {
    for pattern in ["llll", "tllp"] {
        all(pattern, &[2], Kernels::Portable);
    }
}

#[test]
fn the_ladder_is_one_function_at_every_tp_and_not_the_gpt2_block() {
    // Guards the reference: were the literal ladder tp-dependent, or equal to `t`, the
    // tests above would prove less than they claim.
    let cfg = small_config(4, true);
    let source = RandomWeights { seed: 11 };
    let (idx, tgt) = batch(5, 3, 16, cfg.vocab_size);
    let vars = logical_vars(&param_specs(&cfg, "llll"), &source);
    let at = |pattern: &str, n: usize| {
        literal::loss(&vars, &cfg, pattern, n, &idx, &tgt)
            .to_scalar::<f32>()
            .unwrap()
    };
    let (l1, l4) = (at("llll", 1), at("llll", 4));
    assert!((l1 - l4).abs() <= 1e-5 * l1.abs(), "tp 1 {l1} vs tp 4 {l4}");
    let t1 = at("tttt", 1);
    assert!((l1 - t1).abs() > 1e-3, "ladder {l1} vs t {t1}");
}
