//! Invariants of real training steps on ranks as threads: replicated parameters stay
//! bit-identical across ranks, and every parameter receives a gradient.

use crate::common::*;
use std::sync::Arc;
use tp_harness::blocks::{BlockLayout, Fwd};
use tp_harness::model::Gpt;
use tp_harness::tp::{ParamKind, SeededInit};
use tp_harness::train::grads::GradBuffer;
use tp_lab::config::{resolve, Origin};
use tp_lab::data::{CharVocab, Dataset, Meta, Tokenizer};
use tp_lab::launch::job::{Job, RankOptions};
use tp_lab::launch::threads::run_threads;

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
            tokenizer: Tokenizer::Char(vocab),
            source: None,
            train_tokens: n,
            val_tokens: ids.len() - n,
        },
        train: Arc::new(ids[..n].to_vec()),
        val: Arc::new(ids[n..].to_vec()),
    }
}

fn small_run(sets: &[(&str, &str)]) -> tp_lab::config::RunConfig {
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
        let (k, v) = tp_lab::config::parse_assignment(&format!("{k}={v}")).unwrap();
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
        &Job::new(
            cfg.clone(),
            data.clone(),
            RankOptions {
                keep_params: true,
                skip_sample: true,
                skip_checkpoints: false,
            },
        ),
        None,
        None,
    )
    .unwrap();
    assert_eq!(out.len(), 2);
    let layout = BlockLayout::parse("sppp").unwrap();
    let mcfg = cfg.model_config(data.vocab_size()).unwrap();
    let probe = Gpt::build(
        &mcfg,
        &layout,
        &SeededInit {
            seed: cfg.optim.seed,
        },
        &tp_harness::comm::CountedComm::solo(),
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
            b0, b1,
            "replicated parameter {name} ({kind:?}) differs across ranks"
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

fn losses(cfg: &tp_lab::config::RunConfig) -> Vec<f32> {
    let out = run_threads(
        &Job::new(
            cfg.clone(),
            synthetic_dataset(),
            RankOptions {
                keep_params: false,
                skip_sample: true,
                skip_checkpoints: false,
            },
        ),
        None,
        None,
    )
    .unwrap();
    out[0].log.iter().filter_map(|l| l.train_loss).collect()
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert!(((x - y) / y).abs() <= tol, "{what}: {a:?} vs {b:?}");
    }
}

#[test]
fn tp2_dp2_trains_like_tp2_dp1_and_like_accumulation_with_the_same_global_batch() {
    let base = [
        ("pattern", "tspp"),
        ("tp", "2"),
        ("max_iters", "5"),
        ("log_interval", "1"),
        ("eval_interval", "0"),
    ];
    let dp2 = small_run(&[&base[..], &[("dp", "2"), ("batch_size", "4")]].concat());
    let dp1 = small_run(&[&base[..], &[("dp", "1"), ("batch_size", "8")]].concat());
    let acc = small_run(
        &[
            &base[..],
            &[
                ("dp", "1"),
                ("batch_size", "4"),
                ("gradient_accumulation_steps", "2"),
            ],
        ]
        .concat(),
    );
    let (l2, l1, la) = (losses(&dp2), losses(&dp1), losses(&acc));
    assert_eq!(l1.len(), 5);
    assert_close(&l2, &l1, 1e-5, "dp 2 vs dp 1");
    assert_close(&la, &l1, 1e-5, "accumulation 2 vs batch 8");
}

#[test]
fn dropout_masks_agree_across_tp_ranks_so_replicas_stay_identical() {
    let cfg = small_run(&[
        ("pattern", "tspp"),
        ("tp", "2"),
        ("bias", "true"),
        ("max_iters", "8"),
        ("dropout", "0.2"),
    ]);
    let out = run_threads(
        &Job::new(
            cfg.clone(),
            synthetic_dataset(),
            RankOptions {
                keep_params: true,
                skip_sample: true,
                skip_checkpoints: false,
            },
        ),
        None,
        None,
    )
    .unwrap();
    for ((name, a), (_, b)) in out[0].params.iter().zip(&out[1].params) {
        if name.contains("ln") || name == "wte" || name == "wpe" || name.ends_with("pr.b") {
            assert_eq!(a, b, "{name} diverged across ranks under dropout");
        }
    }
}

#[test]
fn dropout_gives_the_same_logical_model_at_tp1_and_tp2() {
    let layout = BlockLayout::parse("tttt").unwrap();
    let cfg = small_config(4, true);
    let (idx, tgt) = batch(9, 2, 16, cfg.vocab_size);
    let fwd = Fwd {
        dropout: 0.2,
        key: Some(42),
    };
    let loss_at = |tp| {
        run_tp(tp, |comm| {
            let model = Gpt::build(&cfg, &layout, &RandomWeights { seed: 3 }, &comm).unwrap();
            model
                .loss(&idx, &tgt, &fwd)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        })[0]
    };
    let (l1, l2) = (loss_at(1), loss_at(2));
    let no_drop = run_tp(1, |comm| {
        let model = Gpt::build(&cfg, &layout, &RandomWeights { seed: 3 }, &comm).unwrap();
        model
            .loss(&idx, &tgt, &Fwd::eval())
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    })[0];
    assert!(((l1 - l2) / l1).abs() < 1e-5, "tp1 {l1} vs tp2 {l2}");
    assert!((l1 - no_drop).abs() > 1e-4, "dropout had no effect");
}

#[test]
fn every_parameter_receives_a_nonzero_gradient_on_every_rank() {
    for (pattern, bias) in [("tspp", true), ("pspt", false)] {
        let layout = BlockLayout::parse(pattern).unwrap();
        let cfg = small_config(layout.n_layer(), bias);
        let (idx, tgt) = batch(9, 2, 16, cfg.vocab_size);
        let results = run_tp(2, |comm| {
            let model = Gpt::build(&cfg, &layout, &SeededInit { seed: 3 }, &comm).unwrap();
            let loss = model.loss(&idx, &tgt, &Fwd::eval()).unwrap();
            let g = loss.backward().unwrap();
            let mut buf = GradBuffer::new(model.params()).unwrap();
            buf.accumulate(model.params(), &g, 1.0).unwrap();
            model
                .params()
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    (
                        p.name.clone(),
                        buf.host(i)
                            .unwrap()
                            .iter()
                            .map(|x| x.abs())
                            .fold(0f32, f32::max),
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
fn data_parallel_ranks_and_micro_steps_see_disjoint_slices_of_one_global_batch() {
    let data = synthetic_dataset();
    let mk = |dp, dp_rank, batch_size, accumulation| tp_lab::data::Batcher {
        data: &data,
        block_size: 16,
        batch_size,
        accumulation,
        dp,
        dp_rank,
        seed: 5,
        device: candle_core::Device::Cpu,
    };
    let split = tp_lab::data::Split::Train;
    let rows = |b: &tp_lab::data::Batcher, micro| {
        b.batch(split, 3, micro)
            .unwrap()
            .0
            .to_vec2::<u32>()
            .unwrap()
    };
    let all = rows(&mk(1, 0, 8, 1), 0);
    let dp_split = [rows(&mk(2, 0, 4, 1), 0), rows(&mk(2, 1, 4, 1), 0)].concat();
    let accum_split = [rows(&mk(1, 0, 4, 2), 0), rows(&mk(1, 0, 4, 2), 1)].concat();
    assert_eq!(dp_split, all);
    assert_eq!(accum_split, all);
    let other_step = mk(1, 0, 8, 1)
        .batch(split, 4, 0)
        .unwrap()
        .0
        .to_vec2::<u32>()
        .unwrap();
    assert_ne!(other_step, all);
}

/// A bench measures its steps alone (`RankOptions::skip_checkpoints`, what `--bench`
/// sets): at tp 2 its ranks assemble no checkpoint after the last step, where the same
/// job as a run gathers every sharded tensor for its last checkpoint. (The GPU profile's
/// kernel table counted those gathers as the step's before.)
#[test]
fn a_job_that_skips_checkpoints_communicates_nothing_after_its_steps() {
    let cfg = small_run(&[
        ("pattern", "tstp"),
        ("tp", "2"),
        ("max_iters", "2"),
        ("eval_interval", "0"),
        ("final_eval", "sampled"),
    ]);
    let data = synthetic_dataset();
    let after_steps = |skip_checkpoints| {
        let opts = RankOptions {
            keep_params: false,
            skip_sample: true,
            skip_checkpoints,
        };
        let out = run_threads(&Job::new(cfg.clone(), data.clone(), opts), None, None).unwrap();
        let calls: u64 = out[0].tally.eval.values().map(|s| s.calls).sum();
        calls
    };
    assert!(
        after_steps(false) > 0,
        "a run's last checkpoint gathers its shards"
    );
    assert_eq!(after_steps(true), 0);
}
