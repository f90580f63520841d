//! The vendored candle-core's changes to backprop (vendor/README.md) keep the pristine
//! arithmetic: a tied weight's gradient from its use as a lookup table and as a head
//! (GPT-2's `wte`) is the head's gradient with the looked-up rows' gradients added in
//! place, in the order of the ids — the bits of the out-of-place `index_add`.

use candle_core::{Device, Tensor, Var};

#[test]
fn a_tied_weights_gradient_from_lookup_and_head_equals_the_out_of_place_index_add_bit_for_bit() {
    let dev = Device::Cpu;
    let (v, c, n) = (11usize, 5usize, 7usize);
    let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, (v, c), &dev).unwrap()).unwrap();
    // Repeated ids: their rows are added more than once, in order.
    let ids = Tensor::new(&[3u32, 0, 3, 10, 7, 3, 0], &dev).unwrap();
    let up = Tensor::randn(0f32, 1.0, (n, v), &dev).unwrap();

    // As in GPT-2: the lookup feeds the head, so backprop reaches the head's use first.
    let h = w
        .as_tensor()
        .index_select(&ids, 0)
        .unwrap()
        .affine(2.0, 0.0)
        .unwrap();
    let logits = h.matmul(&w.as_tensor().t().unwrap()).unwrap();
    let grads = (logits * &up)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let got: Vec<f32> = grads
        .get(&w)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();

    // The same, step by step: the head's gradient, then the rows' added out of place.
    let head_only = h.detach().matmul(&w.as_tensor().t().unwrap()).unwrap();
    let head_grads = (head_only * &up)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let head = head_grads.get(&w).unwrap();
    let rows = up.matmul(w.as_tensor()).unwrap().affine(2.0, 0.0).unwrap();
    let want = head.index_add(&ids, &rows, 0).unwrap();
    let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
    // The rows were added: row 3's gradient is not the head's alone.
    let head: Vec<f32> = head.flatten_all().unwrap().to_vec1().unwrap();
    assert_ne!(got[3 * c], head[3 * c]);
    assert_eq!(got[c], head[c], "row 1 was looked up by no id");
}
