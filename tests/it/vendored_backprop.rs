//! The vendored candle-core's changes (vendor/README.md) keep the pristine
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

/// Change 3: a sum over the leading dimensions (a bias's gradient over batch and time)
/// adds the rows in turn — the order the pristine per-element loop adds them in.
#[test]
fn a_sum_over_leading_dimensions_adds_rows_in_order_bit_for_bit() {
    let dev = Device::Cpu;
    let (b, t, c) = (3usize, 5usize, 7usize);
    let x = Tensor::randn(0f32, 1.0, (b, t, c), &dev).unwrap();
    let v: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
    let mut want_bt = vec![0f32; c];
    let mut want_b = vec![0f32; t * c];
    for (i, &s) in v.iter().enumerate() {
        want_bt[i % c] += s;
        want_b[i % (t * c)] += s;
    }
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let got_bt: Vec<f32> = x
        .sum_keepdim((0, 1))
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let got_b: Vec<f32> = x
        .sum_keepdim(0)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(bits(&got_bt), bits(&want_bt));
    assert_eq!(bits(&got_b), bits(&want_b));
    // A sum over a middle dimension still takes the general path.
    let got_t = x.sum_keepdim(1).unwrap();
    assert_eq!(got_t.dims(), &[b, 1, c]);
    let first: f32 = (0..t).map(|j| v[j * c]).fold(0.0, |a, s| a + s);
    assert_eq!(
        got_t.flatten_all().unwrap().to_vec1::<f32>().unwrap()[0],
        first
    );
}
