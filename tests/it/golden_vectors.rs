//! Every case in the golden folders (`../shared/golden` and `../shared/golden-ladder`,
//! or `TP_GOLDEN_DIR` / `TP_GOLDEN_LADDER_DIR`): weights, a batch, the loss and every
//! gradient from an independent implementation of blocks.md. Each is loaded into our model
//! at the case's tp; loss must agree to 1e-5 relative and every logical gradient to 1e-4.

use crate::common::checks::{check_golden_cases, golden_dir, golden_ladder_dir, On};
use tp_harness::device::Kernels;

#[test]
fn every_golden_case_matches_loss_and_all_gradients() {
    let n = check_golden_cases(
        &golden_dir(),
        &[On::cpu(Kernels::Fused), On::cpu(Kernels::Portable)],
    );
    assert!(n >= 1);
}

#[test]
fn every_golden_ladder_case_matches_loss_and_all_gradients() {
    let n = check_golden_cases(
        &golden_ladder_dir(),
        &[On::cpu(Kernels::Fused), On::cpu(Kernels::Portable)],
    );
    assert!(n >= 2);
}
