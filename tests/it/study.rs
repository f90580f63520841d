//! The study's tools: the sweeps it ships, and the penalty figures and table it is read
//! through.

use std::path::Path;

/// The sweeps shipped in configs/sweeps are what the README and docs tell users to run:
/// every one loads, and each of its points is a config tp-train accepts (a study's point
/// that fails only when the sweep reaches it, hours in, would be found here). A sweep
/// that takes its values from another tuned sweep (`tune: {from: runs/X}`) is loaded
/// against a stand-in record of X in which every layout of X chose a value: each of its
/// layouts must find its family there.
#[test]
fn every_shipped_sweep_loads_and_each_of_its_points_is_a_valid_run() {
    use tp_lab::study::tuning::{TuneDecl, TunedValues};
    use tp_lab::study::tuning_record::{ChoiceRecord, TuningRecord};
    let dir = Path::new(crate::common::REPO).join("configs/sweeps");
    let scratch = crate::common::scratch("shipped-sweeps");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let from = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("tune: {from: runs/"))
            .map(|r| r.trim_end_matches('}').to_string());
        let load = match from {
            None => path.clone(),
            Some(other) => {
                let other_sweep = tp_lab::sweep::Sweep::load(&dir.join(format!("{other}.yaml")))
                    .unwrap_or_else(|e| panic!("{other}: {e:#}"));
                let tune = other_sweep
                    .tune
                    .as_ref()
                    .expect("tune.from names a tuned sweep");
                let mut patterns: Vec<String> = other_sweep
                    .points
                    .iter()
                    .map(|p| p.cfg.model.pattern.to_string())
                    .collect();
                patterns.dedup();
                let record = TuningRecord {
                    decl: TuneDecl {
                        keys: tune.decl.keys.clone(),
                        selection_seeds: tune.decl.selection_seeds.clone(),
                        stall_margin: tune.decl.stall_margin,
                    },
                    report_seeds: tune.report_seeds.clone(),
                    from: None,
                    choices: patterns
                        .into_iter()
                        .map(|pattern| ChoiceRecord {
                            pattern,
                            setting: String::new(),
                            tried: Vec::new(),
                            chosen: Some(TunedValues(
                                tune.decl
                                    .keys
                                    .iter()
                                    .map(|k| (k.clone(), "0.004".into()))
                                    .collect(),
                            )),
                            complete: true,
                            edges: Vec::new(),
                            source: None,
                        })
                        .collect(),
                };
                let stand_in = scratch.join(&other);
                std::fs::create_dir_all(&stand_in).unwrap();
                std::fs::write(
                    stand_in.join("tuning.json"),
                    tp_lab::run_dir::versioned::to_json(&record).unwrap(),
                )
                .unwrap();
                let copy = scratch.join(path.file_name().unwrap());
                let text = text.replace(
                    &format!("from: runs/{other}"),
                    &format!("from: {}", stand_in.display()),
                );
                std::fs::write(&copy, text).unwrap();
                copy
            }
        };
        let s = tp_lab::sweep::Sweep::load(&load)
            .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        assert!(!s.points.is_empty(), "{}", path.display());
        for p in &s.points {
            p.cfg
                .validate()
                .unwrap_or_else(|e| panic!("{} {}: {e:#}", path.display(), p.name));
        }
        checked += 1;
    }
    assert!(checked >= 4, "{checked} sweep files");
}

/// A tiny study made the way a user makes one (a sweep over tp, length and pattern with
/// two seeds), read by `tp-plot --penalty`: one row per setting and pattern, each
/// difference the mean of the per-seed differences of the runs' own final val losses,
/// and the figures (tp 1 and 2 make TP-degree series, 4 and 6 iterations length ones).
#[test]
fn tp_plot_penalty_pairs_each_pattern_with_its_setting_s_all_t_runs_by_seed() {
    use crate::common::*;
    let d = scratch("penalty");
    std::fs::write(
        d.join("study.yaml"),
        "name: tiny_study\nbase: {n_layer: 2, n_embd: 32, eval_interval: 4, eval_iters: 1, sample_tokens: 0}\ngrid: {tp: [1, 2], max_iters: [4, 6], pattern: [tt, pp]}\nseeds: [1, 2]\nbaseline: tt\n",
    )
    .unwrap();
    assert_ok(&bin("tp-sweep", &d, &["study.yaml", "--out", "runs"], &[]));
    let runs: Vec<String> = std::fs::read_dir(d.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.yaml").exists())
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(runs.len(), 16, "{runs:?}");
    let mut args = vec!["--penalty", "--out", "study"];
    args.extend(runs.iter().map(String::as_str));
    assert_ok(&bin("tp-plot", &d, &args, &[]));
    let loss = |tp: usize, iters: usize, p: &str, seed: u64| -> f64 {
        let dir = d.join(format!(
            "runs/tp={tp},max_iters={iters},pattern={p},seed={seed}"
        ));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        s["final_val_loss"].as_f64().unwrap()
    };
    let csv = std::fs::read_to_string(d.join("study/penalty.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 8, "{csv}");
    for (tp, iters) in [(1, 4), (1, 6), (2, 4), (2, 6)] {
        let here = |r: &&Vec<&str>, p: &str| {
            r[3] == tp.to_string() && r[4] == iters.to_string() && r[5] == p
        };
        let row = rows
            .iter()
            .find(|r| here(r, "pp"))
            .unwrap_or_else(|| panic!("no pp at tp {tp}, {iters} it: {csv}"));
        let diff = |seed| loss(tp, iters, "pp", seed) - loss(tp, iters, "tt", seed);
        let want = (diff(1) + diff(2)) / 2.0;
        let got: f64 = row[12].parse().unwrap();
        assert!((got - want).abs() < 2e-6, "tp {tp}: {got} vs {want}\n{csv}");
        assert_eq!(
            (row[6], row[8], row[11], row[14]),
            ("1", "2", "tt", "2"),
            "{csv}"
        );
        let base = rows.iter().find(|r| here(r, "tt")).unwrap();
        assert_eq!(
            (base[6], base[8], base[11], base[12]),
            ("4", "2", "", ""),
            "{csv}"
        );
    }
    changes_along_each_axis_are_paired_by_seed(&d, &loss);
    for f in ["penalty_vs_tp", "penalty_vs_iters", "penalty_vs_syncs"] {
        assert_png(&d.join(format!("study/{f}.png")));
        assert_svg(&d.join(format!("study/{f}.svg")));
    }
    let md = std::fs::read_to_string(d.join("study/penalty.md")).unwrap();
    assert!(
        md.contains("| 2x32/4h, tp 2, 4 it, shakespeare_char | pp | 1 (1) | 2 |"),
        "{md}"
    );
    // Where the setting's runs were made, and how long they trained.
    let made_here = format!(" | {}", crate::common::machine::machine_here());
    let line = md
        .lines()
        .find(|l| {
            l.starts_with("| 2x32/4h, tp 2, 4 it, shakespeare_char | 4 | ")
                && l.contains(&made_here)
        })
        .unwrap_or_else(|| panic!("no provenance line of tp 2, 4 it: {md}"));
    let hours: f64 = line.split(" | ").nth(2).unwrap().parse().unwrap();
    assert!((0.0..0.05).contains(&hours), "{line}");
    let bad = bin(
        "tp-plot",
        &d,
        &[&["--penalty", "--baseline", "ss"][..], &args[3..]].concat(),
        &[],
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--baseline ss is not a pattern") && err.lines().count() == 1,
        "{err}"
    );
}

/// penalty_change.csv of the tiny study: how pp's penalty changes along each axis, the
/// other held — tp 1 -> 2 at 4 and at 6 iterations, 4 -> 6 iterations at tp 1 and at
/// tp 2; settings that differ in both are not compared. Each change is the mean over
/// seeds of the per-seed change of the runs' own final val losses.
fn changes_along_each_axis_are_paired_by_seed(
    d: &Path,
    loss: &dyn Fn(usize, usize, &str, u64) -> f64,
) {
    let changes = std::fs::read_to_string(d.join("study/penalty_change.csv")).unwrap();
    let rows: Vec<Vec<&str>> = changes
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{changes}");
    let penalty = |tp, iters, seed| loss(tp, iters, "pp", seed) - loss(tp, iters, "tt", seed);
    for (axis, (tp_a, it_a), (tp_b, it_b)) in [
        ("tp", (1, 4), (2, 4)),
        ("tp", (1, 6), (2, 6)),
        ("length", (1, 4), (1, 6)),
        ("length", (2, 4), (2, 6)),
    ] {
        let (from, to) = (
            format!("2x32/4h,{tp_a},{it_a}"),
            format!("2x32/4h,{tp_b},{it_b}"),
        );
        let row = rows
            .iter()
            .find(|r| r[0] == axis && r[3..6].join(",") == from && r[6..9].join(",") == to)
            .unwrap_or_else(|| panic!("no {axis} change {from} -> {to}: {changes}"));
        assert_eq!((row[1], row[2], row[13]), ("pp", "tt", "2"), "{changes}");
        let want = [1, 2]
            .iter()
            .map(|&s| penalty(tp_b, it_b, s) - penalty(tp_a, it_a, s))
            .sum::<f64>()
            / 2.0;
        let got: f64 = row[11].parse().unwrap();
        assert!(
            (got - want).abs() < 2e-6,
            "{axis}: {got} vs {want}\n{changes}"
        );
    }
}

/// The stopping rule: after its own seeds, a sweep adds one seed at a time to every group
/// whose paired interval is wider than `until_ci95` (with its baseline partner) until
/// `max_seeds`; a rerun adds the same seeds, so it finishes as a skip. A target the
/// first seeds already meet adds nothing; a rule that cannot pair is refused up front.
#[test]
fn more_seeds_adds_paired_seeds_until_the_interval_is_narrow_or_the_cap_and_resumes() {
    use crate::common::*;
    use crate::sweep::{assert_sweeps_refused, sweep};
    let never = "grid: {pattern: [tt, pp]}\nseeds: [1, 2]\nbaseline: tt\nmore_seeds: {until_ci95: 1.0e-9, max_seeds: 4}\n";
    let runs = |d: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(d.join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.contains("seed="))
            .collect();
        v.sort();
        v
    };
    let d = scratch("more-seeds-never");
    let o = sweep(&d, never);
    assert_ok(&o);
    let want: Vec<String> = ["pp", "tt"]
        .iter()
        .flat_map(|p| (1..=4).map(move |s| format!("pattern={p},seed={s}")))
        .collect();
    assert_eq!(runs(&d), want);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("seed 3 for the groups whose paired 95% interval is wider than ±0.000000001: pattern=pp (±")
            && out.contains("seed 4 for"),
        "{out}"
    );
    let md = std::fs::read_to_string(d.join("out/summary.md")).unwrap();
    // Four seeds a group, four pairs.
    assert!(md.contains("| pattern=pp | pp | 1 | 4 |"), "{md}");
    // Again: the same rounds, every run finished earlier.
    let again = sweep(&d, never);
    assert_ok(&again);
    let out = String::from_utf8_lossy(&again.stdout);
    assert_eq!(out.matches("skipped").count(), 8, "{out}");
    assert!(!out.contains(": running"), "{out}");
    assert_eq!(runs(&d), want);
    // Met at once: nothing added.
    let d = scratch("more-seeds-met");
    assert_ok(&sweep(
        &d,
        "grid: {pattern: [tt, pp]}\nseeds: [1, 2]\nbaseline: tt\nmore_seeds: {until_ci95: 10.0, max_seeds: 4}\n",
    ));
    assert_eq!(runs(&d).len(), 4);
    let bad_rules = [
        ("grid: {pattern: [tt, pp]}\nseeds: [1, 2]\nmore_seeds: {until_ci95: 0.01, max_seeds: 4}\n", "needs seeds"),
        ("grid: {pattern: [tt, pp]}\nseeds: [1, 2]\nbaseline: tt\nmore_seeds: {until_ci95: 0, max_seeds: 4}\n", "until_ci95"),
        ("grid: {pattern: [tt, pp]}\nseeds: [1, 2, 3]\nbaseline: tt\nmore_seeds: {until_ci95: 0.01, max_seeds: 2}\n", "raise max_seeds"),
        ("grid: {pattern: [tt, pp]}\nseeds: [1, 2]\nbaseline: tt\nmore_seeds: {until: 0.01}\n", "unknown field"),
    ];
    assert_sweeps_refused("more-seeds-bad", &bad_rules);
}

/// Issue 35's shape in miniature: 2-layer layouts and 4-layer ones spelled with repeats
/// (`4xs`, `s3xp`, `4xp`) in one study. Across depths a layout pairs with its stretch by
/// seed however it is spelled (ss -> 4xs, sp -> s3xp, pp -> 4xp; not 2x(sp), whose runs
/// alternate), and the s-then-p family is drawn against the length of its p runs.
#[test]
fn layouts_spelled_with_repeats_pair_with_their_stretch_across_depths_and_p_runs_are_drawn() {
    use crate::common::*;
    let d = scratch("penalty-depth");
    let base = "base: {n_embd: 32, max_iters: 4, eval_interval: 4, eval_iters: 1, sample_tokens: 0}\nseeds: [1, 2]\n";
    for (name, patterns, baseline) in [
        ("shallow", "[tt, ss, sp, pp]", "tt"),
        ("deep", "[4xt, 4xs, 2x(sp), s3xp, 4xp]", "4xt"),
    ] {
        std::fs::write(
            d.join(format!("{name}.yaml")),
            format!("name: {name}\n{base}grid: {{pattern: {patterns}}}\nbaseline: {baseline}\n"),
        )
        .unwrap();
        let file = format!("{name}.yaml");
        let out = format!("runs/{name}");
        assert_ok(&bin("tp-sweep", &d, &[&file, "--out", &out], &[]));
    }
    let mut args = vec!["--penalty".to_string(), "--out".into(), "study".into()];
    for sweep in ["shallow", "deep"] {
        for e in std::fs::read_dir(d.join("runs").join(sweep)).unwrap() {
            let p = e.unwrap().path();
            if p.join("summary.json").exists() {
                args.push(p.display().to_string());
            }
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // A TP-degree figure left from an earlier drawing of other runs: these runs span one
    // degree, so it is removed, and said.
    std::fs::create_dir_all(d.join("study")).unwrap();
    std::fs::write(d.join("study/penalty_vs_tp.png"), b"stale").unwrap();
    let o = bin("tp-plot", &d, &args, &[]);
    assert_ok(&o);
    assert!(!d.join("study/penalty_vs_tp.png").exists());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("removed study/penalty_vs_tp.png"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let changes = std::fs::read_to_string(d.join("study/penalty_change.csv")).unwrap();
    // The same changes arranged by axis: depth's three, each with its direction.
    let by_axis = std::fs::read_to_string(d.join("study/penalty_by_axis.md")).unwrap();
    assert!(by_axis.contains("## depth: 3 changes"), "{by_axis}");
    assert!(
        by_axis.contains("| 2 layers |") && by_axis.contains("| 4 layers |"),
        "{by_axis}"
    );
    let pairs: Vec<(String, String)> = changes
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!((f[0], f[13]), ("depth", "2"), "{changes}");
            (f[1].to_string(), f[2].to_string())
        })
        .collect();
    let want = [
        ("ss -> 4xs", "tt -> 4xt"),
        ("sp -> s3xp", "tt -> 4xt"),
        ("pp -> 4xp", "tt -> 4xt"),
    ];
    for (pattern, baseline) in want {
        assert!(
            pairs.contains(&(pattern.into(), baseline.into())),
            "no {pattern}: {changes}"
        );
    }
    assert_eq!(pairs.len(), 3, "{changes}");
    assert_png(&d.join("study/penalty_vs_prun.png"));
    assert_svg(&d.join("study/penalty_vs_prun.svg"));
    let svg = std::fs::read_to_string(d.join("study/penalty_vs_prun.svg")).unwrap();
    // The family of the deep setting is there by name, the alternating 2x(sp) too (p runs
    // of 1), Megatron's layout (no p runs of s-then-p shape) is not a point.
    let texts: Vec<&str> = svg.lines().map(str::trim).collect();
    for p in ["4xs", "s3xp", "4xp", "2x(sp)", "ss", "sp", "pp"] {
        assert!(texts.contains(&p), "{p} not drawn");
    }
    assert!(!texts.contains(&"4xt") && !texts.contains(&"0.5"), "{svg}");
}
