//! `--trace`: every rank's timeline in Chrome's trace format. Its spans nest on each
//! rank's compute track, it holds every collective comm.json counts (as often), with the
//! same hidden and exposed time, and `tp-plot --timeline` draws it.

use crate::common::*;
use std::collections::HashMap;
use tp_lab::run_dir::trace_file::TraceFile;

/// llll on an emulated 1 Gbit/s link at tp 2, every step traced: a ladder's started
/// all-reduces are hidden in part, forward and backward.
fn traced_run(d: &std::path::Path) -> std::path::PathBuf {
    let o = bin(
        "tp-train",
        d,
        &[
            "--pattern",
            "llll",
            "--trace",
            "--trace_start=0",
            "--trace_steps=6",
            "--max_iters=6",
            "--n_embd=32",
            "--eval_interval=0",
            "--final_eval=sampled",
            "--sample_tokens=0",
            "--link_gbps=1",
            "--link_latency_us=50",
            "--quiet",
            "--out",
            "run",
        ],
        &[],
    );
    assert_ok(&o);
    d.join("run")
}

#[test]
fn a_trace_holds_every_collective_comm_json_counts_with_its_hidden_and_exposed_time() {
    let d = scratch("trace-counts");
    let run = traced_run(&d);
    let trace = TraceFile::read(&run).unwrap();
    let comm: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("comm.json")).unwrap()).unwrap();
    // Rank 0's collectives of training (comm.json is rank 0's tally).
    let mut by_kind: HashMap<String, (u64, f64, f64)> = HashMap::new();
    for e in trace
        .events
        .iter()
        .filter(|e| e.pid == 0 && e.cat == "collective")
    {
        if e.args["phase"] != "train" {
            continue;
        }
        let k = by_kind
            .entry(e.args["kind"].as_str().unwrap().into())
            .or_default();
        k.0 += 1;
        k.1 += e.args["hidden_us"].as_f64().unwrap() / 1e6;
        k.2 += e.args["exposed_us"].as_f64().unwrap() / 1e6;
    }
    let mut checked = 0;
    for (kind, t) in comm["totals"].as_object().unwrap() {
        let calls = t["calls"].as_u64().unwrap();
        let (n, hidden, exposed) = by_kind.get(kind).copied().unwrap_or_default();
        assert_eq!(n, calls, "{kind}: {n} traced, comm.json counts {calls}");
        if calls == 0 {
            continue;
        }
        let (want_hidden, seconds) = (
            t["hidden_seconds"].as_f64().unwrap(),
            t["seconds"].as_f64().unwrap(),
        );
        let close = |a: f64, b: f64| (a - b).abs() <= 0.01 * b.abs().max(1e-9) + 1e-6;
        assert!(
            close(hidden, want_hidden),
            "{kind}: hidden {hidden} vs {want_hidden}"
        );
        assert!(
            close(exposed, seconds - want_hidden),
            "{kind}: exposed {exposed} vs {}",
            seconds - want_hidden
        );
        checked += 1;
    }
    assert!(checked >= 3, "{comm}");
    // The ladder hid part of its forward sums and of its backward ones (issue 40).
    assert!(
        by_kind["tp-forward"].1 > 0.0 && by_kind["tp-backward"].1 > 0.0,
        "{by_kind:?}"
    );
    // The drawing's green is the tally's hidden: over the first traced step, the hidden
    // spans it paints on rank 0's rows add up to what rank 0's collectives of that step
    // say they hid (it painted windows the rank spent waiting on another lane before).
    let drawn = tp_lab::plot::timeline::drawn_spans(&run, &trace).unwrap();
    let painted: f64 = drawn
        .iter()
        .filter(|s| s.3 == "hidden" && s.0.starts_with("rank 0 "))
        .map(|s| s.2 - s.1)
        .sum();
    let step = trace
        .events
        .iter()
        .filter(|e| e.cat == "step" && e.pid == 0)
        .min_by(|a, b| a.ts.total_cmp(&b.ts))
        .unwrap();
    let (from, to) = (step.ts, step.ts + step.dur.unwrap());
    let tallied: f64 = trace
        .events
        .iter()
        .filter(|e| e.pid == 0 && e.cat == "collective" && e.ts >= from && e.ts < to)
        .map(|e| e.args["hidden_us"].as_f64().unwrap() / 1e3)
        .sum();
    assert!(
        (painted - tallied).abs() <= 0.05 * tallied + 0.05,
        "painted {painted:.3} ms hidden, the tally says {tallied:.3} ms"
    );
    // Each collective names its layer and block kind.
    let fwd = trace
        .events
        .iter()
        .find(|e| e.cat == "collective" && e.args["kind"] == "tp-forward")
        .unwrap();
    assert!(
        fwd.args["site"].as_str().unwrap().starts_with("layer.") && fwd.args["block"] == "l",
        "{fwd:?}"
    );
}

#[test]
fn spans_nest_on_every_ranks_compute_track_and_hidden_windows_lie_in_their_collective() {
    let d = scratch("trace-nest");
    let run = traced_run(&d);
    let trace = TraceFile::read(&run).unwrap();
    let eps = 5.0; // microseconds: instants converted to wall time at slightly different moments
    for rank in 0..2 {
        let mut spans: Vec<(f64, f64, &str)> = trace
            .events
            .iter()
            .filter(|e| e.ph == "X" && e.pid == rank && e.tid == 0)
            .map(|e| (e.ts, e.ts + e.dur.unwrap(), e.name.as_str()))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64, &str)> = Vec::new();
        for s in &spans {
            while open.last().is_some_and(|o| o.1 <= s.0 + eps) {
                open.pop();
            }
            if let Some(o) = open.last() {
                assert!(
                    s.1 <= o.1 + eps,
                    "rank {rank}: `{}` overlaps `{}` without nesting",
                    s.2,
                    o.2
                );
            }
            open.push(*s);
        }
        let names: Vec<&str> = spans.iter().map(|s| s.2).collect();
        for want in [
            "step 0",
            "forward 0",
            "backward 0",
            "layers 0-3 (l) forward",
            "layer 2 (l)",
            "layers 0-3 (l) backward",
            "optimizer",
            "gradient sync",
        ] {
            assert!(
                names.contains(&want),
                "rank {rank} lacks `{want}`: {names:?}"
            );
        }
        // Hidden windows inside the collective of their lane.
        for h in trace
            .events
            .iter()
            .filter(|e| e.pid == rank && e.cat == "hidden")
        {
            let inside = trace.events.iter().any(|c| {
                c.pid == rank
                    && c.tid == h.tid
                    && c.cat == "collective"
                    && c.ts <= h.ts + eps
                    && h.ts + h.dur.unwrap() <= c.ts + c.dur.unwrap() + eps
            });
            assert!(inside, "{h:?}");
        }
    }
    // Perfetto's names for the tracks.
    assert!(trace.events.iter().any(|e| e.ph == "M"
        && e.args["name"] == "rank 1 (".to_string() + &tp_harness::util::host::label() + ")"));
    let o = bin("tp-plot", &d, &["--timeline", "run", "--out", "pics"], &[]);
    assert_ok(&o);
    assert_png(&d.join("pics/timeline.png"));
    assert_svg(&d.join("pics/timeline.svg"));
    let o = bin("tp-plot", &d, &["--timeline", "nothere"], &[]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_trace_range_outside_the_run_is_one_clear_line() {
    let d = scratch("trace-range");
    let o = bin(
        "tp-train",
        &d,
        &["--trace", "--max_iters=5", "--out", "run"],
        &[],
    );
    one_clear_error(&o, "trace no step of a run of max_iters 5");
    assert!(!d.join("run").exists());
}

/// The picture agrees with the tally: a started collective's window is green only where
/// the rank computed. Here collective A is in flight from 0 to 100 us and the rank
/// computes through it except 20..80, where it waits for collective B: the tally counts
/// 40 us of A hidden, and so must the drawing (it painted all 100 green before).
#[test]
fn a_hidden_window_is_drawn_only_where_the_rank_computes_not_where_it_waits_on_another() {
    use tp_harness::util::trace::{Span, Track};
    let span = |name: &str, cat: &str, track, from: f64, to: f64| Span {
        name: name.into(),
        cat: cat.into(),
        track,
        start_us: 1e6 + from,
        dur_us: to - from,
        args: Default::default(),
    };
    let spans = vec![
        span("step 0", "step", Track::Compute, 0.0, 200.0),
        span("layer 0", "layer", Track::Compute, 0.0, 20.0),
        span("tp-forward A", "collective", Track::Comm, 0.0, 100.0),
        span("hidden tp-forward A", "hidden", Track::Comm, 0.0, 100.0),
        span("tp-forward B", "collective", Track::Comm, 10.0, 80.0),
        span("wait tp-forward B", "wait", Track::Compute, 20.0, 80.0),
        span("layer 1", "layer", Track::Compute, 80.0, 100.0),
        span("wait tp-forward A", "wait", Track::Compute, 100.0, 110.0),
    ];
    let cfg = tp_lab::config::RunConfig::default();
    let trace = TraceFile::of(&cfg, &[(0, "host".into(), spans)], 0).unwrap();
    let drawn = tp_lab::plot::timeline::drawn_spans(std::path::Path::new("run"), &trace).unwrap();
    let hidden: Vec<(f64, f64)> = drawn
        .iter()
        .filter(|s| s.3 == "hidden")
        .map(|s| (s.1 * 1e3, s.2 * 1e3))
        .collect();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert_eq!(hidden.len(), 2, "{hidden:?}");
    assert!(
        close(hidden[0].0, 0.0) && close(hidden[0].1, 20.0),
        "{hidden:?}"
    );
    assert!(
        close(hidden[1].0, 80.0) && close(hidden[1].1, 100.0),
        "{hidden:?}"
    );
    // Where the rank waited, its compute row is red: never green on top of it.
    let waits: Vec<_> = drawn
        .iter()
        .filter(|s| s.3 == "exposed" && s.0.contains("compute"))
        .collect();
    assert_eq!(waits.len(), 2);
}
