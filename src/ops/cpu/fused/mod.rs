//! Fused CPU kernels with hand-written backward, as candle custom ops. Each replaces a
//! chain of generic ops (and their allocations and copies) in forward and backward; each
//! has a test against the composed reference in `ops` (values and gradients). Each adds
//! its time to the per-op profile (`ops::profile`).

mod attention;
mod cross_entropy;
mod gelu;
mod layer_norm;
mod linear;
mod shard_loss;
mod softmax;
mod storage;

pub use attention::causal_attention;
pub use cross_entropy::cross_entropy;
pub use gelu::gelu;
pub use layer_norm::layer_norm;
pub use linear::{linear, linear_t};
pub use shard_loss::{row_max, shard_softmax_stats};
pub use softmax::causal_softmax;

#[cfg(test)]
mod tests {
    use crate::ops::*;
    use candle_core::{Device, Var};
    use rand::{Rng, SeedableRng};

    fn rand_var(shape: &[usize], seed: u64, scale: f32) -> Var {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| (rng.random::<f32>() - 0.5) * 2.0 * scale)
            .collect();
        Var::from_tensor(&Tensor::from_vec(v, shape, &Device::Cpu).unwrap()).unwrap()
    }

    fn rel(a: &Tensor, b: &Tensor) -> f32 {
        let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let num: f32 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f32>()
            .sqrt();
        let den: f32 = b.iter().map(|y| y * y).sum::<f32>().sqrt().max(1e-12);
        num / den
    }

    /// Value and gradients of `fused` and `reference` under a random upstream gradient.
    fn check(
        vars: &[&Var],
        fused: impl Fn() -> Tensor,
        reference: impl Fn() -> Tensor,
        what: &str,
    ) {
        let (yf, yr) = (fused(), reference());
        assert!(
            rel(&yf, &yr) < 1e-5,
            "{what}: values differ by {}",
            rel(&yf, &yr)
        );
        let up = rand_var(yf.dims(), 99, 1.0);
        let gf = (yf * up.as_tensor())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gr = (yr * up.as_tensor())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for (i, v) in vars.iter().enumerate() {
            let (a, b) = (
                gf.get(v.as_tensor()).unwrap(),
                gr.get(v.as_tensor()).unwrap(),
            );
            assert!(
                rel(a, b) < 1e-4,
                "{what}: gradient {i} differs by {}",
                rel(a, b)
            );
        }
    }

    #[test]
    fn fused_layer_norm_matches_the_composed_one_in_values_and_gradients() {
        let x = rand_var(&[3, 5, 32], 1, 2.0);
        let w = rand_var(&[32], 2, 1.0);
        let b = rand_var(&[32], 3, 1.0);
        check(
            &[&x, &w, &b],
            || layer_norm(Kernels::Fused, &x, &w, Some(&b), 1e-5).unwrap(),
            || layer_norm_composed(&x, &w, Some(&b), 1e-5).unwrap(),
            "layer norm",
        );
    }

    #[test]
    fn fused_gelu_matches_candles_erf_and_tanh_forms() {
        let x = rand_var(&[4, 50], 4, 4.0);
        for act in [Activation::Gelu, Activation::GeluTanh] {
            check(
                &[&x],
                || activation(Kernels::Fused, &x, act).unwrap(),
                || activation_composed(&x, act).unwrap(),
                "gelu",
            );
        }
    }

    #[test]
    fn fused_causal_softmax_matches_the_masked_composed_one() {
        let s = rand_var(&[2, 3, 7, 7], 5, 3.0);
        check(
            &[&s],
            || causal_softmax(Kernels::Fused, &s).unwrap(),
            || causal_softmax_composed(&s).unwrap(),
            "causal softmax",
        );
    }

    #[test]
    fn fused_cross_entropy_matches_the_composed_one() {
        let logits = rand_var(&[12, 11], 6, 3.0);
        let t = Tensor::from_vec(
            (0..12u32).map(|i| (i * 7) % 11).collect::<Vec<_>>(),
            12,
            &Device::Cpu,
        )
        .unwrap();
        check(
            &[&logits],
            || cross_entropy(Kernels::Fused, &logits, &t).unwrap(),
            || cross_entropy_composed(&logits, &t).unwrap(),
            "cross entropy",
        );
    }

    #[test]
    fn fused_shard_softmax_stats_match_the_composed_ones_in_values_and_gradients() {
        let logits = rand_var(&[12, 11], 8, 3.0);
        let target: Vec<Option<u32>> = (0..12u32)
            .map(|i| (i % 3 != 0).then_some((i * 5) % 11))
            .collect();
        // A shift that is not the local maximum, as the group's maximum usually is not.
        let shift = (row_max(Kernels::Portable, logits.as_tensor()).unwrap() + 0.7).unwrap();
        assert_eq!(
            row_max(Kernels::Fused, logits.as_tensor())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap(),
            row_max(Kernels::Portable, logits.as_tensor())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
        );
        check(
            &[&logits],
            || shard_softmax_stats(Kernels::Fused, &logits, &shift, &target).unwrap(),
            || shard_softmax_stats(Kernels::Portable, &logits, &shift, &target).unwrap(),
            "shard softmax statistics",
        );
    }

    #[test]
    fn fused_causal_attention_matches_the_composed_one_in_values_and_gradients() {
        // 2 sequences of 7 tokens, 3 heads of 4: Q, K, V blocks of 12 columns each; then
        // sequences long enough to be split into 2 (70 = 35 + 35) and 4 ragged causal
        // row blocks (133 = 3 x 34 + 31).
        for (t, seed) in [(7, 7), (70, 12), (133, 13)] {
            let qkv = rand_var(&[2, t, 36], seed, 1.5);
            check(
                &[&qkv],
                || causal_attention(Kernels::Fused, &qkv, 3, 4).unwrap(),
                || causal_attention_composed(&qkv, 3, 4).unwrap(),
                "causal attention",
            );
        }
    }

    #[test]
    fn fused_linear_matches_matmul_plus_bias_also_through_a_transposed_weight() {
        let x = rand_var(&[3, 5, 8], 8, 1.0);
        let w = rand_var(&[8, 6], 9, 1.0);
        let b = rand_var(&[6], 10, 1.0);
        check(
            &[&x, &w, &b],
            || linear(Kernels::Fused, &x, &w, Some(&b)).unwrap(),
            || linear_composed(&x, &w, Some(&b)).unwrap(),
            "linear with bias",
        );
        // The tied head's layout: the weight is a transposed (V, C) view.
        let wte = rand_var(&[6, 8], 11, 1.0);
        check(
            &[&x, &wte],
            || linear(Kernels::Fused, &x, &wte.t().unwrap(), None).unwrap(),
            || linear_composed(&x, &wte.t().unwrap(), None).unwrap(),
            "linear on a transposed weight",
        );
        // The same product with the (V, C) weight itself: gradient in (V, C), with bias.
        check(
            &[&x, &wte, &b],
            || linear_t(Kernels::Fused, &x, &wte, Some(&b)).unwrap(),
            || linear_composed(&x, &wte.t().unwrap(), Some(&b)).unwrap(),
            "linear_t on an (out, in) weight",
        );
    }

    #[test]
    fn fused_kernels_give_the_same_result_on_one_thread_and_on_the_rayon_pool() {
        // Row-parallel kernels split work by rows only: every output value is computed by
        // the same code in the same order either way.
        let x = rand_var(&[4, 9, 36], 12, 1.0);
        let w = rand_var(&[36], 13, 1.0);
        let run = || {
            let y = causal_attention(Kernels::Fused, &x, 3, 4).unwrap();
            let z = activation(
                Kernels::Fused,
                &layer_norm(Kernels::Fused, &x, &w, None, 1e-5).unwrap(),
                Activation::Gelu,
            )
            .unwrap();
            let g = (y.sum_all().unwrap() + z.sum_all().unwrap())
                .unwrap()
                .backward()
                .unwrap();
            let gx = g
                .get(x.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let gw = g.get(w.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            (gx, gw)
        };
        let one = crate::ops::cpu::gemm::with_threads(1, run);
        let two = crate::ops::cpu::gemm::with_threads(2, run);
        assert_eq!(one.0, two.0);
        for (a, b) in one.1.iter().zip(&two.1) {
            // dw's row blocks are summed in a different grouping.
            assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "{a} vs {b}");
        }
    }
}
