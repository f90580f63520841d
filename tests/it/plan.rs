//! `tp-plan`: its counts are a run's tally (calls and bytes of every collective kind, per
//! step, for layouts of every kind at tp 2 x dp 2), it answers the 124M question with
//! step times, the hidden/exposed split, the break-even bandwidth and the figure, and
//! what it cannot answer is one line naming the valid choices.

use crate::common::*;
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::{CommDtype, CommKind};
use tp_harness::train::bucket_cap::BucketCap;
use tp_lab::planner::request::{Head, Request, Shape};

/// The planner's request for the tally test's run of `pattern`: mini at 32 wide, tp 2 x
/// dp 2, batch 12, its comm_dtype and head.
fn mini_request(pattern: &str, dtype: &str, vocab_parallel: bool) -> Request {
    Request {
        shape: Shape {
            name: "mini".into(),
            n_layer: 4,
            n_head: 4,
            n_embd: 32,
            vocab: 65,
            block: 64,
            bias: false,
        },
        layout: BlockLayout::parse(pattern).unwrap(),
        tp: 2,
        dp: 2,
        batch: 12,
        comm_dtype: CommDtype::all().find(|d| d.label() == dtype).unwrap(),
        bucket_mb: BucketCap::Auto,
        head: if vocab_parallel {
            Head::VocabParallel
        } else {
            Head::Replicated
        },
    }
}

#[test]
fn the_planners_collectives_per_step_are_a_runs_tally() {
    let d = scratch("plan-counts");
    for (pattern, dtype, vocab_parallel) in [
        ("sppp", "f32", false),
        ("llll", "f32", false),
        ("tstp", "int8", false),
        ("sppp", "f32", true),
        ("tstp", "bf16", true),
    ] {
        planned_as_tallied(&d, pattern, dtype, vocab_parallel);
    }
}

/// Trains `pattern` for two steps at tp 2 x dp 2 (mini at 32 wide) and holds the
/// planner's collectives per step to the run's tally: calls and bytes of every kind.
pub(crate) fn planned_as_tallied(
    d: &std::path::Path,
    pattern: &str,
    dtype: &str,
    vocab_parallel: bool,
) {
    let out = format!("run-{pattern}-{dtype}-{vocab_parallel}");
    let o = tp_train(
        d,
        &[
            "--pattern",
            pattern,
            "--tp",
            "2",
            "--dp",
            "2",
            "--set",
            "n_embd=32",
            "--set",
            "max_iters=2",
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
            "--set",
            "final_eval=sampled",
            "--set",
            &format!("vocab_parallel={vocab_parallel}"),
            "--set",
            &format!("comm_dtype={dtype}"),
            "--out",
            &out,
        ],
    );
    assert_ok(&o);
    let comm = tp_lab::run_dir::read_comm(&d.join(&out)).unwrap().unwrap();
    let r = mini_request(pattern, dtype, vocab_parallel);
    // The run's buckets (ddp_bucket_mb: auto, the default) are the planner's: the
    // same rule on the same gradient bytes.
    let planned_bucket = BucketCap::Auto.bytes(4 * r.params_per_rank() as usize);
    assert_eq!(
        comm.grad_bucket_bytes,
        Some(planned_bucket as u64),
        "{pattern}"
    );
    // (PyTorch's 25 MiB would put this model's gradients in one bucket.)
    let buckets = r.buckets().count;
    assert!(buckets > 4.0, "{pattern}: {buckets} buckets");
    for t in r.traffic() {
        let ran = &comm.per_step[&t.kind];
        assert_eq!(ran.bytes, t.bytes, "{pattern} {}: bytes", t.kind.label());
        // Activation sums exactly; gradient buckets by the bucket rule, within one of
        // what backprop's order seals.
        let exact = matches!(t.kind, CommKind::TpForward | CommKind::TpBackward);
        let slack = if exact { 0.0 } else { 1.0 };
        assert!(
            (ran.calls - t.calls).abs() <= slack,
            "{pattern} {}: {} calls planned, {} ran",
            t.kind.label(),
            t.calls,
            ran.calls
        );
    }
    // Every kind the run moved data in is planned (scalars apart).
    for (kind, v) in &comm.per_step {
        if v.bytes > 64.0 {
            assert!(
                r.traffic().iter().any(|t| t.kind == *kind),
                "{pattern}: {} not planned",
                kind.label()
            );
        }
    }
}

fn plan_json(d: &std::path::Path, args: &[&str]) -> serde_json::Value {
    assert_ok(&bin("tp-plan", d, args, &[]));
    serde_json::from_str(&std::fs::read_to_string(d.join("plan/plan.json")).unwrap()).unwrap()
}

#[test]
fn tp_plan_answers_124m_at_tp_4_and_6_on_100_gbit_and_nvlink_with_the_break_even() {
    let d = scratch("plan-124m");
    let json = plan_json(
        &d,
        &[
            "--model",
            "gpt2",
            "--pattern",
            "3xsppp",
            "--tp",
            "4",
            "--tp",
            "6",
            "--link",
            "100gbe",
            "--link",
            "nvlink4",
            "--link",
            "100:0",
            "--device",
            "h100",
            "--mfu",
            "0.4",
            "--out",
            "plan",
        ],
    );
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 3, "(12xt, 3xsppp) x 2 tps x 3 links");
    // A GPU plan sums in bf16 unless told otherwise, as Megatron's bf16 training does.
    assert_eq!(json["comm_dtype"], "bf16");
    let find = |link: &str, tp: u64| {
        let s = |r: &&serde_json::Value| {
            r["step"]["link"] == link && r["step"]["tp"] == tp && r["step"]["pattern"] == "3xsppp"
        };
        rows.iter().find(s).unwrap()
    };
    let (slow, fast) = (find("100gbe", 4), find("nvlink4", 4));
    // Memory per rank: tp 6 holds less a rank than tp 4, and the H100's 80 GB bounds
    // the batch.
    let mem = |tp: u64| &find("nvlink4", tp)["memory"];
    assert!(mem(6)["total_gib"].as_f64() < mem(4)["total_gib"].as_f64());
    assert!(mem(4)["largest_batch"].as_u64().unwrap() > 8, "{}", mem(4));
    // Fewer syncs pay more on the slower link. With real latencies 3xsppp's 6 sums
    // against 24 pay at any bandwidth (null: "every bandwidth"); on a link of bandwidth
    // alone they pay below a finite break-even, above 100 Gbit/s for 124M on an H100.
    assert!(slow["speedup"].as_f64().unwrap() > fast["speedup"].as_f64().unwrap());
    assert!(fast["speedup"].as_f64().unwrap() > 1.0);
    assert_eq!(slow["pays"]["where"], "every_bandwidth", "{slow}");
    let pays = &find("100:0", 4)["pays"];
    assert_eq!(pays["where"], "bands", "{pays}");
    assert!(
        pays["bands"][0]["from_gbit"].is_null(),
        "from the lowest: {pays}"
    );
    let below = pays["bands"][0]["to_gbit"].as_f64().unwrap();
    assert!(below > 100.0 && below < 1e5, "{below}");
    let step = slow["step_s"].as_f64().unwrap();
    let parts = slow["step"]["compute_s"].as_f64().unwrap() + slow["exposed_s"].as_f64().unwrap();
    assert!((step - parts).abs() < 1e-12);
    // "Never" and "every bandwidth" are named, not numbers standing for them, as is the
    // DP group's link when it is the TP link.
    assert_eq!(json["dp_link"], "same as tp");
    for row in json["rows"].as_array().unwrap() {
        let w = row["negligible"]["where"].as_str().unwrap();
        assert!(["never", "every_bandwidth", "above"].contains(&w), "{row}");
        assert_eq!(w == "above", row["negligible"]["gbit"].is_number());
    }
    // The JSON names its tool, carries every link's curves, and has no negative zero.
    let text = std::fs::read_to_string(d.join("plan/plan.json")).unwrap();
    assert!(!text.contains("-0.0"), "a signed zero in plan.json");
    assert!(json["tool"].as_str().unwrap().starts_with("tp-plan "));
    let curves = json["curves"].as_array().unwrap();
    for link in ["100gbe", "nvlink4", "100:0"] {
        assert_eq!(
            curves.iter().filter(|c| c["link"] == link).count(),
            4,
            "{link}"
        );
    }
    let md = std::fs::read_to_string(d.join("plan/plan.md")).unwrap();
    assert!(
        md.contains("| 3xsppp | 6 |") && md.contains("| 12xt | 4 |"),
        "{md}"
    );
    assert!(md.contains("Megatron"), "the FLOP convention is named");
    assert!(md.contains("## Memory per rank") && md.contains("largest batch that fits"));
    assert!(
        md.contains("not fitted to a measurement"),
        "links priced from published or assumed constants are flagged"
    );
    assert_png(&d.join("plan/step_vs_bandwidth.png"));
}

/// A ladder's speed-up rises with bandwidth (its sums hide once the link finishes them
/// behind the next module): on NVLink 12xl is over 1.10x, and its row says where it pays
/// as a band that holds NVLink's bandwidth, not "pays below: never" beside 1.27x.
#[test]
fn a_ladder_on_nvlink_pays_in_a_band_that_holds_the_link() {
    let d = scratch("plan-ladder");
    let json = plan_json(
        &d,
        &[
            "--model",
            "gpt2",
            "--pattern",
            "12xl",
            "--tp",
            "4",
            "--link",
            "nvlink4",
            "--device",
            "h100",
            "--mfu",
            "0.4",
            "--out",
            "plan",
        ],
    );
    let ladder = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step"]["pattern"] == "12xl")
        .unwrap();
    let speedup = ladder["speedup"].as_f64().unwrap();
    assert!(speedup >= 1.10, "{ladder}");
    let nvlink = json["links"][0]["gbit_per_s"].as_f64().unwrap();
    let bands = ladder["pays"]["bands"].as_array().expect("bands");
    let holds = bands.iter().any(|b| {
        b["from_gbit"].as_f64().is_none_or(|f| f <= nvlink)
            && b["to_gbit"].as_f64().is_none_or(|t| t >= nvlink)
    });
    assert!(holds, "{nvlink} Gbit/s in {bands:?}");
    let md = std::fs::read_to_string(d.join("plan/plan.md")).unwrap();
    let row = md.lines().find(|l| l.starts_with("| 12xl |")).unwrap();
    assert!(row.contains("above ") && !row.contains("never |"), "{row}");
}

#[test]
fn a_plan_it_cannot_make_is_one_line_naming_the_valid_choices() {
    let d = scratch("plan-errors");
    let run = |args: &[&str]| bin("tp-plan", &d, args, &[]);
    // Out-of-range numbers, negative ones included (never clap's "unexpected argument"),
    // each one line naming the value and its range.
    let base = ["--model", "gpt2", "--pattern", "12xt", "--device", "h100"];
    for (extra, needle) in [
        (
            &["--mfu", "0.4", "--link", "-100:5"][..],
            "bandwidth -100 Gbit/s must be a positive",
        ),
        (
            &["--mfu", "0.4", "--link", "0:5"][..],
            "bandwidth 0 Gbit/s must be a positive",
        ),
        (
            &["--mfu", "0.4", "--link", "inf:5"][..],
            "bandwidth inf Gbit/s",
        ),
        (
            &["--mfu", "0.4", "--link", "100:-5"][..],
            "latency -5 us must be zero or",
        ),
        (&["--mfu", "-0.4"][..], "--mfu must lie in (0, 1], got -0.4"),
        (
            &["--mfu", "0.4", "--bucket-mb", "-1"][..],
            "--bucket-mb -1: auto or a positive",
        ),
        (
            &["--mfu", "0.4", "--n-layer", "2000"][..],
            "--n-layer 2000 is over the 1000 layers",
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        one_clear_error(&run(&args), needle);
    }
    one_clear_error(
        &run(&[
            "--model",
            "gpt2",
            "--pattern",
            "3xsppp",
            "--tp",
            "8",
            "--device",
            "tflops:100",
        ]),
        "tp may be 1, 2, 3, 4, 6, 12",
    );
    one_clear_error(
        &run(&["--model", "gpt2", "--pattern", "12xt", "--device", "h100"]),
        "needs --mfu",
    );
    one_clear_error(
        &run(&[
            "--model",
            "gpt2",
            "--pattern",
            "sppp",
            "--device",
            "tflops:100",
        ]),
        "e.g. 12xt",
    );
    one_clear_error(
        &run(&[
            "--model",
            "gpt2",
            "--pattern",
            "12xt",
            "--device",
            "tflops:100",
            "--link",
            "warp",
        ]),
        "unknown link `warp`",
    );
    one_clear_error(&run(&["--model", "gpt2"]), "--pattern is missing");
    assert!(!d.join("plots").exists(), "nothing written");
    // Listing the links is a question of its own: no layout is asked for.
    let list = run(&["--link", "list"]);
    assert!(list.status.success(), "--link list without --pattern");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ns-1gbit") && l.contains("0.96 Gbit/s")),
        "the calibrated namespace link is listed with its fitted rate: {text}"
    );
}

/// GPT-2 medium at tp 8 on an H100 at MFU 0.4 with Megatron's vocabulary-parallel head
/// (a GPU plan's default): each rank computes 1/8 of 6N FLOPs a token plus attention's
/// (Megatron's count, 6·L·T·C a token with the causal half), within 10%; the replicated
/// head (`--head replicated`) puts the whole 2·C·V a token on every rank.
#[test]
fn gpt2_medium_at_tp_8_computes_its_share_of_6n_plus_attention_with_a_split_head() {
    let d = scratch("plan-medium");
    let compute = |head: &str| {
        let json = plan_json(
            &d,
            &[
                "--model",
                "gpt2-medium",
                "--pattern",
                "24xt",
                "--tp",
                "8",
                "--link",
                "nvlink4",
                "--device",
                "h100",
                "--mfu",
                "0.4",
                "--head",
                head,
                "--out",
                "plan",
            ],
        );
        assert_eq!(json["head"], head);
        json["rows"][0]["step"]["compute_s"].as_f64().unwrap()
    };
    let (l, c, v, t) = (24.0, 1024.0, 50257.0, 1024.0);
    let n = 12.0 * l * c * c + v * c;
    let tokens = 8.0 * 1024.0;
    let want = (6.0 * n + 6.0 * l * t * c) * tokens / 8.0 / (989e12 * 0.4);
    let split = compute("vocab-parallel");
    assert!(
        (split / want - 1.0).abs() < 0.10,
        "planned {split} s against 6N + attention's {want} s"
    );
    let whole = compute("replicated");
    // Each rank's share is ceil(50257 / 8) = 6283 rows.
    let head_whole = 3.0 * 2.0 * c * (v - 6283.0) * tokens / (989e12 * 0.4);
    assert!(((whole - split) / head_whole - 1.0).abs() < 1e-6);
    let md = std::fs::read_to_string(d.join("plan/plan.md")).unwrap();
    assert!(md.contains("the embedding and LM head replicated on every rank"));
}

/// Each MFU the planner lists for a GPU is its record's, recomputed: PyTorch's from the
/// `mfu` its script wrote, the harness's from its bench.json's tokens a second, counting
/// 6N + 12LTC FLOPs a GPT-2 124M token (vocab 50304) against 989.4 TFLOP/s; and the
/// step time it names is the record's.
#[test]
fn the_planners_mfu_references_are_their_records() {
    for r in tp_lab::planner::catalog::MFU_REFERENCES {
        let path = r
            .source
            .strip_prefix("H200, ")
            .expect("a source names its GPU");
        let text = std::fs::read_to_string(std::path::Path::new(REPO).join(path))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        // PyTorch's script prints lines before its record; a bench.json is one object.
        let record: serde_json::Value = serde_json::from_str(&text)
            .or_else(|_| serde_json::from_str(text.trim().lines().last().unwrap()))
            .unwrap();
        let (c, layers, t, vocab) = (768.0, 12.0, 1024.0, 50304.0);
        let per_token = 6.0 * (12.0 * layers * c * c + vocab * c) + 12.0 * layers * t * c;
        let mfu = record["mfu"]
            .as_f64()
            .unwrap_or_else(|| record["tokens_per_s"].as_f64().unwrap() * per_token / 1e12 / 989.4);
        assert!((mfu - r.mfu).abs() < 5e-4, "{}: {mfu} in {path}", r.what);
        let ms = format!("{:.1} ms", record["ms_per_step"].as_f64().unwrap());
        assert!(r.what.contains(&ms), "{}: the record says {ms}", r.what);
    }
}
