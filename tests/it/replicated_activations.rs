//! The replicated-activation invariant over every kind (docs/architecture.md, "Adding a
//! block kind"): the stream between stages, and so the final norm's input, is
//! bit-identical on every rank of the TP group — with dropout on, at tp 2 and 4, for
//! single kinds, mixed layouts with p and l runs, bf16 compute and compressed sums.

use crate::common::{batch, run_tp, small_config, RandomWeights};
use std::sync::Arc;
use tp_harness::blocks::{BlockLayout, Fwd, ReplicaProbe};
use tp_harness::comm::CommDtype;
use tp_harness::device::ComputeDtype;
use tp_harness::model::Gpt;

/// Runs one training-mode forward and backward of `pattern` on `tp` thread ranks with a
/// probe on every rank's stack; the probe's verdict (stages checked, or the first stage
/// whose output differs between ranks, named).
pub(crate) fn probe_verdict(
    pattern: &str,
    tp: usize,
    dtype: ComputeDtype,
    comm: CommDtype,
) -> Result<usize, String> {
    let layout = BlockLayout::parse(pattern).unwrap();
    let mut cfg = small_config(layout.n_layer(), true);
    cfg.dtype = dtype;
    let (idx, tgt) = batch(5, 2, 8, cfg.vocab_size);
    let probe = Arc::new(ReplicaProbe::default());
    run_tp(tp, |comm_| {
        let comm_ = comm_.with_comm_dtype(comm);
        let source = RandomWeights { seed: 11 };
        let mut model = Gpt::build(&cfg, &layout, &source, &comm_).unwrap();
        model.watch_replicas(probe.clone());
        let fwd = Fwd {
            dropout: 0.1,
            key: Some(42),
        };
        model.loss(&idx, &tgt, &fwd).unwrap().backward().unwrap();
    });
    probe
        .verify()
        .map_err(|e| format!("{pattern} at tp {tp}: {e}"))
}

fn stages_checked(pattern: &str, tp: usize, dtype: ComputeDtype, comm: CommDtype) -> usize {
    probe_verdict(pattern, tp, dtype, comm).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_kind_and_mixed_layout_keeps_the_stream_between_stages_identical_on_every_rank() {
    let patterns = [
        ("t", 1),
        ("s", 1),
        ("p", 1),
        ("l", 1),
        ("tspl", 4),
        ("sppp", 2),
        ("tspp", 3),
        ("llll", 1),
        ("2x(lp)s", 5),
        ("pllsppt", 5),
    ];
    for tp in [2, 4] {
        for (pattern, stages) in patterns {
            let got = stages_checked(pattern, tp, ComputeDtype::F32, CommDtype::F32);
            assert_eq!(got, stages, "{pattern} at tp {tp}: stages checked");
        }
    }
}

#[test]
fn bf16_compute_and_int8_sums_keep_the_stream_identical_on_every_rank() {
    for pattern in ["tspl", "2x(lp)s"] {
        assert!(stages_checked(pattern, 2, ComputeDtype::Bf16, CommDtype::F32) > 0);
        assert!(stages_checked(pattern, 4, ComputeDtype::F32, CommDtype::Int8) > 0);
    }
}
