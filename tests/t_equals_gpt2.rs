//! A `t`-only model at tp 1, 2 and 4 gives the loss, every parameter gradient (sharded
//! ones gathered to full shape) and the input gradient of a plain dense GPT-2 with the
//! same weights.

mod common;
use candle_core::Var;
use common::*;
use tp_harness::device::Kernels;

fn check_against_dense(pattern: &str, tp: usize, bias: bool) {
    check_against_dense_with(pattern, tp, bias, Kernels::Fused);
}

fn check_against_dense_with(pattern: &str, tp: usize, bias: bool, kernels: Kernels) {
    let mut cfg = small_config(
        tp_harness::blocks::Layout::parse(pattern)
            .unwrap()
            .n_layer(),
        bias,
    );
    cfg.kernels = kernels;
    let source = RandomWeights { seed: 7 };
    let (idx, tgt) = batch(3, 3, 16, cfg.vocab_size);
    let ours = tp_logical(&cfg, pattern, tp, &source, &idx, &tgt);

    let vars = logical_vars(&param_specs(&cfg, pattern), &source);
    let loss = dense::loss(&vars, &cfg, &idx, &tgt);
    let ref_grads = grads_of(&vars, &loss.backward().unwrap());
    let ref_loss = loss.to_scalar::<f32>().unwrap();
    let x = Var::from_tensor(&dense::embed(&vars, &idx).detach()).unwrap();
    let ref_xg = dense::loss_embedded(&vars, &cfg, x.as_tensor(), &tgt)
        .backward()
        .unwrap();
    let ref_xg = ref_xg.get(x.as_tensor()).unwrap();

    let what = format!("{pattern} tp{tp} bias={bias} kernels={}", kernels.label());
    let rel = ((ours.loss - ref_loss) / ref_loss).abs();
    assert!(
        rel <= 1e-5,
        "{what}: loss {} vs dense {ref_loss} (rel {rel:e})",
        ours.loss
    );
    assert_grads_match(&ours.grads, &ref_grads, 1e-4, &what);
    let e = rel_err(&ours.input_grad, ref_xg);
    assert!(e <= 1e-4, "{what}: input gradient differs by {e:e}");
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
            check_against_dense_with("tttt", tp, bias, Kernels::Portable);
        }
    }
}
