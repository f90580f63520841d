//! Invariants of real training steps on ranks as threads: replicated parameters stay
//! bit-identical across ranks, and every parameter receives a gradient.

mod common;
use common::*;
use std::sync::Arc;
use tp_harness::blocks::{Fwd, Layout};
use tp_harness::data::{CharVocab, Dataset, Meta};
use tp_harness::model::Gpt;
use tp_harness::tp::{ParamKind, SeededInit};
use tp_harness::train::config::{resolve, Origin};
use tp_harness::train::grads::GradBuffer;
use tp_harness::train::launch::run_threads;
use tp_harness::train::rank::RankOptions;

fn synthetic_dataset() -> Dataset {
    let text: String = (0..4000)
        .map(|i| ["to be or not to be, ", "that is the question. "][i % 2])
        .collect();
    let vocab = CharVocab::from_text(&text);
    let ids = vocab.encode(&text).unwrap();
    let n = ids.len() * 9 / 10;
    Dataset {
        meta: Meta {
            dataset: "synthetic".into(),
            vocab,
            train_tokens: n,
            val_tokens: ids.len() - n,
        },
        train: Arc::new(ids[..n].to_vec()),
        val: Arc::new(ids[n..].to_vec()),
    }
}

fn small_run(sets: &[(&str, &str)]) -> tp_harness::train::config::RunConfig {
    let mut o = vec![];
    for (k, v) in [
        ("n_embd", "32"),
        ("block_size", "16"),
        ("batch_size", "4"),
        ("eval_interval", "10"),
        ("eval_iters", "2"),
        ("sample_tokens", "0"),
        ("warmup_iters", "2"),
    ]
    .iter()
    .chain(sets.iter())
    {
        let (k, v) = tp_harness::train::config::parse_assignment(&format!("{k}={v}")).unwrap();
        o.push((k, v, Origin::Flag("test".into())));
    }
    resolve(&o).unwrap()
}

#[test]
fn replicated_parameters_stay_bit_identical_across_tp_ranks_after_20_steps_of_sppp() {
    let cfg = small_run(&[
        ("pattern", "sppp"),
        ("tp", "2"),
        ("bias", "true"),
        ("max_iters", "20"),
        ("learning_rate", "3e-3"),
    ]);
    let data = synthetic_dataset();
    let out = run_threads(
        &cfg,
        &data,
        None,
        RankOptions {
            keep_params: true,
            skip_sample: true,
        },
    )
    .unwrap();
    assert_eq!(out.len(), 2);
    let layout = Layout::parse("sppp").unwrap();
    let mcfg = cfg.model_config(data.vocab().len()).unwrap();
    let probe = Gpt::build(
        &mcfg,
        &layout,
        &SeededInit { seed: cfg.seed },
        &tp_harness::tp::CountedComm::solo(),
    )
    .unwrap();
    let mut checked = 0;
    for (i, (name, v0)) in out[0].params.iter().enumerate() {
        let kind = probe.params().get(name).unwrap().kind;
        let initial = probe
            .params()
            .get(name)
            .unwrap()
            .var
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        if matches!(kind, ParamKind::Sharded(_)) {
            continue;
        }
        let (n1, v1) = &out[1].params[i];
        assert_eq!(n1, name);
        let b0: Vec<u32> = v0.iter().map(|x| x.to_bits()).collect();
        let b1: Vec<u32> = v1.iter().map(|x| x.to_bits()).collect();
        assert_eq!(
            b0,
            b1,
            "replicated parameter {name} ({}) differs across ranks",
            kind.label()
        );
        assert_ne!(
            v0, &initial,
            "{name} never moved: the test would prove nothing"
        );
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} replicated parameters checked"
    );
    let last = out[0]
        .log
        .iter()
        .rev()
        .find(|l| l.val_loss.is_some())
        .unwrap();
    assert!(last.val_loss.unwrap().is_finite());
}

#[test]
fn every_parameter_receives_a_nonzero_gradient_on_every_rank() {
    for (pattern, bias) in [("tspp", true), ("pspt", false)] {
        let layout = Layout::parse(pattern).unwrap();
        let cfg = small_config(layout.n_layer(), bias);
        let (idx, tgt) = batch(9, 2, 16, cfg.vocab_size);
        let results = run_tp(2, |comm| {
            let model = Gpt::build(&cfg, &layout, &SeededInit { seed: 3 }, &comm).unwrap();
            let loss = model.loss(&idx, &tgt, &Fwd::eval()).unwrap();
            let g = loss.backward().unwrap();
            let mut buf = GradBuffer::new(model.params());
            buf.accumulate(model.params(), &g, 1.0).unwrap();
            model
                .params()
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    (
                        p.name.clone(),
                        buf.slice(i).iter().map(|x| x.abs()).fold(0f32, f32::max),
                    )
                })
                .collect::<Vec<_>>()
        });
        for (rank, grads) in results.iter().enumerate() {
            for (name, max) in grads {
                assert!(
                    *max > 0.0,
                    "{pattern} bias={bias}: {name} gets no gradient on rank {rank}"
                );
            }
        }
    }
}

#[test]
fn data_parallel_ranks_see_disjoint_slices_of_one_global_batch() {
    let data = synthetic_dataset();
    let mk = |dp, dp_rank, batch_size| tp_harness::data::Batcher {
        data: &data,
        block_size: 16,
        batch_size,
        dp,
        dp_rank,
        seed: 5,
    };
    let split = tp_harness::data::Split::Train;
    let (all, _) = mk(1, 0, 8).batch(split, 3, 0).unwrap();
    let (a, _) = mk(2, 0, 4).batch(split, 3, 0).unwrap();
    let (b, _) = mk(2, 1, 4).batch(split, 3, 0).unwrap();
    let joined = candle_core::Tensor::cat(&[a, b], 0).unwrap();
    assert_eq!(
        joined.to_vec2::<u32>().unwrap(),
        all.to_vec2::<u32>().unwrap()
    );
}
