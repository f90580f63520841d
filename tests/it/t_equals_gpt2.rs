//! A `t`-only model at tp 1, 2 and 4 gives the loss, every parameter gradient (sharded
//! ones gathered to full shape) and the input gradient of a plain dense GPT-2 with the
//! same weights.

use crate::common::checks::{self, On};
use tp_harness::device::Kernels;

fn check_against_dense(pattern: &str, tp: usize, bias: bool) {
    checks::check_against_dense(pattern, tp, bias, &On::cpu(Kernels::Fused));
}

#[test]
fn t_only_model_matches_dense_gpt2_at_tp1() {
    check_against_dense("tttt", 1, true);
    check_against_dense("tttt", 1, false);
}

#[test]
fn t_only_model_matches_dense_gpt2_at_tp2() {
    check_against_dense("tttt", 2, true);
    check_against_dense("tttt", 2, false);
}

#[test]
fn t_only_model_matches_dense_gpt2_at_tp4() {
    check_against_dense("tttt", 4, true);
    check_against_dense("tttt", 4, false);
}

#[test]
fn s_only_model_at_tp1_is_the_gpt2_block() {
    check_against_dense("ssss", 1, true);
    check_against_dense("ssss", 1, false);
}

#[test]
fn t_only_model_on_the_portable_path_matches_dense_gpt2_at_tp1_2_and_4() {
    for tp in [1, 2, 4] {
        for bias in [true, false] {
            checks::check_against_dense("tttt", tp, bias, &On::cpu(Kernels::Portable));
        }
    }
}

/// bf16 passes (f32 master weights, f32 norms, softmax and loss) stay within bf16's
/// rounding of dense f32 GPT-2 at tp 1, 2 and 4: a wiring error (a missed cast, a
/// reduction in the wrong dtype) would be off by far more.
#[test]
fn t_only_model_in_bf16_is_within_bf16_rounding_of_dense_gpt2_at_tp1_2_and_4() {
    let on = On {
        dtype: tp_harness::device::ComputeDtype::Bf16,
        loss_tol: 1e-2,
        grad_tol: 5e-2,
        ..On::cpu(Kernels::Fused)
    };
    for tp in [1, 2, 4] {
        checks::check_against_dense("tttt", tp, true, &on);
    }
}
