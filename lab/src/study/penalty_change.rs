//! How a pattern's loss penalty changes along one axis of a study — the TP degree, the
//! training length, the model or the tuning (one learning rate for all, then each
//! layout's own best) — paired by seed: for every seed that has the pattern
//! and its baseline in both settings, (pattern − baseline) in the second setting less
//! (pattern − baseline) in the first. Whether a gap closes, stays or grows is then a
//! change with its 95% interval, not two intervals eyed against each other (each of which
//! carries the seeds' spread that the pairing takes out).

use super::penalty::ALPHA;
use super::penalty::{PenaltyRow, PenaltyRun, Setting};
use super::setting::Axis;
use crate::analysis::stats::{by_seed, holm, Replicates, Signs};
use crate::analysis::table::Table;
use crate::config::Variant;

/// One pattern's penalty in two settings that differ along one axis.
#[derive(Debug, Clone, PartialEq)]
pub struct PenaltyChange {
    /// The TP degree, the length, the model or the tuning ([`Setting::axis_to`]).
    pub axis: Axis,
    /// The two settings as the penalty table names them, the smaller first, and what
    /// they are.
    pub from: String,
    pub to: String,
    pub from_setting: Setting,
    pub to_setting: Setting,
    /// The pattern and its baseline, as `sppp -> sppppp` where the two settings spell
    /// the same layout at different depths.
    pub variant: String,
    pub baseline: String,
    /// The mean penalty in each setting over the seeds the change is paired on.
    pub from_penalty: f64,
    pub to_penalty: f64,
    /// Per seed: the penalty in `to` less the penalty in `from`.
    pub change: Replicates,
    /// Their signs (the exact sign test's input).
    pub signs: Signs,
    /// Corrected over the changes along the same axis (one family: every change the table
    /// gives on that axis): the t-test's p adjusted by Holm's method, the sign test's
    /// likewise, and the half-width of the change's Bonferroni interval (1 - 0.05/m).
    pub p_holm: f64,
    pub p_sign_holm: f64,
    pub corrected_half: f64,
    /// m: how many changes the axis's family holds.
    pub family: usize,
}

impl PenaltyChange {
    /// What the change says in words, at the family's 5% (Holm): the penalty `grows`,
    /// `shrinks`, or `no change detected`.
    pub fn direction(&self) -> &'static str {
        match (self.p_holm < ALPHA, self.change.mean > 0.0) {
            (true, true) => "grows",
            (true, false) => "shrinks",
            (false, _) => "no change detected",
        }
    }
}

/// Holm's p-values (t and sign test) and Bonferroni intervals per axis.
fn correct_per_axis(changes: &mut [PenaltyChange]) {
    let mut axes: Vec<Axis> = changes.iter().map(|c| c.axis).collect();
    axes.sort();
    axes.dedup();
    for axis in axes {
        let members: Vec<usize> = (0..changes.len())
            .filter(|&i| changes[i].axis == axis)
            .collect();
        let p: Vec<f64> = members
            .iter()
            .map(|&i| changes[i].change.p_value())
            .collect();
        let p_sign: Vec<f64> = members
            .iter()
            .map(|&i| changes[i].signs.p_value())
            .collect();
        let m = members.len();
        for ((&i, ph), ps) in members.iter().zip(holm(&p)).zip(holm(&p_sign)) {
            let c = &mut changes[i];
            c.p_holm = ph;
            c.p_sign_holm = ps;
            c.corrected_half = c.change.half_width(ALPHA / m as f64);
            c.family = m;
        }
    }
}

/// (seed, pattern − baseline) in `setting`, for the seeds that ran both.
fn penalties(
    runs: &[PenaltyRun],
    setting: &Setting,
    variant: &Variant,
    base: &Variant,
) -> Vec<(u64, f64)> {
    let of = |v: &Variant| -> Vec<(u64, f64)> {
        runs.iter()
            .filter(|r| &r.setting == setting && &r.variant == v)
            .map(|r| (r.seed, r.final_val))
            .collect()
    };
    let pairs = by_seed(&of(variant), &of(base));
    pairs
        .into_iter()
        .map(|(seed, x, b)| (seed, x - b))
        .collect()
}

/// Whether `a` in one setting and `b` in another are the same layout: at the same depth,
/// the same block kinds layer by layer however spelled (`12xs` is `ssssssssssss`); across
/// depths, the same layout stretched ([`Variant::stretches_to`]).
fn same_layout(a: &Variant, b: &Variant, same_depth: bool) -> bool {
    if same_depth {
        a == b
    } else {
        a.stretches_to(b)
    }
}

/// `a`, or `a -> b` where the layouts are spelled differently.
fn both(a: &Variant, b: &Variant) -> String {
    let (a, b) = (a.to_string(), b.to_string());
    if a == b {
        a
    } else {
        format!("{a} -> {b}")
    }
}

/// Two settings along `axis` in the order a change runs, each with its label: as given
/// (the smaller first), except that a tuning change runs from the setting of one value for
/// every layout (its label naming that value) to the tuned one.
fn ordered<'a>(
    axis: Axis,
    first: (&'a Setting, &'a str),
    second: (&'a Setting, &'a str),
) -> ((&'a Setting, String), (&'a Setting, String)) {
    let (from, to) = match axis == Axis::Tuning && !first.0.tuned.is_empty() {
        true => (second, first),
        false => (first, second),
    };
    let from_label = match axis {
        Axis::Tuning => format!("{}, {}", from.1, from.0.values_of(&to.0.tuned)),
        _ => from.1.to_string(),
    };
    ((from.0, from_label), (to.0, to.1.to_string()))
}

/// Every pattern's change between every two settings of `rows` that differ along one
/// axis only, smaller setting first, untuned before tuned (both must pair it with the
/// same baseline; across depths, layouts match by [`same_layout`]).
pub fn penalty_changes(runs: &[PenaltyRun], rows: &[PenaltyRow]) -> Vec<PenaltyChange> {
    let mut settings: Vec<(&Setting, &str)> = Vec::new();
    for r in rows {
        if !settings.iter().any(|(s, _)| *s == &r.setting) {
            settings.push((&r.setting, &r.setting_label));
        }
    }
    let mut out = Vec::new();
    for (i, &first) in settings.iter().enumerate() {
        for &second in &settings[i + 1..] {
            let Some(axis) = first.0.axis_to(second.0) else {
                continue;
            };
            let ((a, a_label), (b, b_label)) = ordered(axis, first, second);
            let same = |x: &Variant, y: &Variant| same_layout(x, y, a.n_layer == b.n_layer);
            for ra in rows.iter().filter(|r| &r.setting == a) {
                let Some(base) = &ra.baseline else { continue };
                let Some((rb, base_b)) = rows.iter().find_map(|r| {
                    let rb_base = r.baseline.as_ref()?;
                    (&r.setting == b && same(&ra.variant, &r.variant) && same(base, rb_base))
                        .then_some((r, rb_base))
                }) else {
                    continue;
                };
                let (pa, pb) = (
                    penalties(runs, a, &ra.variant, base),
                    penalties(runs, b, &rb.variant, base_b),
                );
                let pairs: Vec<(f64, f64)> = by_seed(&pa, &pb)
                    .into_iter()
                    .map(|(_, x, y)| (x, y))
                    .collect();
                let changes: Vec<f64> = pairs.iter().map(|(x, y)| y - x).collect();
                let Some(change) = Replicates::of(&changes) else {
                    continue;
                };
                let mean = |f: fn(&(f64, f64)) -> f64| {
                    pairs.iter().map(f).sum::<f64>() / pairs.len() as f64
                };
                out.push(PenaltyChange {
                    axis,
                    from: a_label.clone(),
                    to: b_label.clone(),
                    from_setting: a.clone(),
                    to_setting: b.clone(),
                    variant: both(&ra.variant, &rb.variant),
                    baseline: both(base, base_b),
                    from_penalty: mean(|p| p.0),
                    to_penalty: mean(|p| p.1),
                    change,
                    signs: Signs::of(&changes),
                    p_holm: 1.0,
                    p_sign_holm: 1.0,
                    corrected_half: f64::INFINITY,
                    family: 0,
                });
            }
        }
    }
    correct_per_axis(&mut out);
    out
}

/// The smallest true change the pairs would find four times in five, where it is finite.
fn detectable(r: &Replicates) -> Option<f64> {
    Some(r.detectable()).filter(|d| d.is_finite())
}

fn interval(r: &Replicates) -> String {
    if r.ci95.is_finite() {
        format!(
            "{:+.4} ({:+.4} .. {:+.4})",
            r.mean,
            r.mean - r.ci95,
            r.mean + r.ci95
        )
    } else {
        format!("{:+.4} (-)", r.mean)
    }
}

/// The change's Bonferroni interval over its axis, `-` for one pair.
fn corrected(c: &PenaltyChange) -> String {
    match c.corrected_half.is_finite() {
        true => format!(
            "{:+.4} .. {:+.4}",
            c.change.mean - c.corrected_half,
            c.change.mean + c.corrected_half
        ),
        false => "-".into(),
    }
}

fn significant(r: &Replicates) -> String {
    if r.excludes_zero() { "yes" } else { "no" }.into()
}

/// `penalty_change.md`: the table, with how to read it.
pub fn markdown(changes: &[PenaltyChange]) -> String {
    let mut t = Table::new([
        "axis",
        "pattern",
        "paired with",
        "from",
        "to",
        "penalty there",
        "penalty here",
        "change (95% interval)",
        "pairs",
        "detectable (80% power)",
        "significant",
        "interval (Bonferroni over the axis)",
        "p (Holm over the axis)",
        "signs, sign test p (Holm)",
        "direction (Holm)",
    ]);
    for c in changes {
        t.row([
            c.axis.to_string(),
            c.variant.clone(),
            c.baseline.clone(),
            c.from.clone(),
            c.to.clone(),
            format!("{:+.4}", c.from_penalty),
            format!("{:+.4}", c.to_penalty),
            interval(&c.change),
            c.change.n.to_string(),
            detectable(&c.change).map_or("-".into(), |d| format!("{d:.4}")),
            significant(&c.change),
            corrected(c),
            format!("{:.3}", c.p_holm),
            format!("{}+ {}- {:.3}", c.signs.above, c.signs.below, c.p_sign_holm),
            c.direction().to_string(),
        ]);
    }
    format!(
        "How each pattern's penalty (its final val loss less its baseline's, paired by seed) changes between two settings that differ along one axis only: TP degree, length (iterations), width, depth, heads, model (several of layers, width and heads), width and TP degree together at the same width per rank C/N, or tuning (every layout at one value of the tuned keys, then each at its own best: the change is what tuning did to the penalty). Per seed that has both patterns in both settings: the penalty in the second setting less the penalty in the first, with the 95% interval of its mean (Student's t). The penalties shown are the means over those seeds. A change whose interval excludes zero grows (+) or shrinks (-) the gap; one that does not, leaves it within what the pairs can tell. Corrected for the changes the table gives along the same axis (m of them): the interval at 1 - 0.05/m (Bonferroni), the t-test's p adjusted by Holm's method, the exact sign test beside it (how many pairs grew and shrank, its binomial p Holm-adjusted likewise: it assumes nothing of the changes' distribution, and 4 pairs can never reach 5%), and the direction that survives the correction.\n\n{}",
        t.markdown()
    )
}

/// `penalty_change.csv`: one line per change, plain values (each setting as its model,
/// TP degree and iterations; a tuning change's untuned side also by the values it ran
/// every layout at, `from_values`).
pub fn csv(changes: &[PenaltyChange]) -> String {
    let mut t = Table::new([
        "axis",
        "pattern",
        "baseline",
        "from_model",
        "from_tp",
        "from_iters",
        "to_model",
        "to_tp",
        "to_iters",
        "from_penalty",
        "to_penalty",
        "change_mean",
        "change_ci95",
        "pairs",
        "detectable",
        "significant",
        "from_values",
        "half_corrected",
        "p_holm",
        "above",
        "below",
        "p_sign_holm",
        "direction",
    ]);
    for c in changes {
        let (from, to) = (&c.from_setting, &c.to_setting);
        // A tuning change's settings share model, TP degree and length: the values the
        // untuned one ran every layout at tell it apart.
        let from_values = match c.axis {
            Axis::Tuning => from.values_of(&to.tuned),
            _ => String::new(),
        };
        t.row([
            c.axis.to_string(),
            c.variant.clone(),
            c.baseline.clone(),
            from.model(),
            from.tp.to_string(),
            from.iters.to_string(),
            to.model(),
            to.tp.to_string(),
            to.iters.to_string(),
            format!("{:.6}", c.from_penalty),
            format!("{:.6}", c.to_penalty),
            format!("{:.6}", c.change.mean),
            Some(c.change.ci95)
                .filter(|ci| ci.is_finite())
                .map_or(String::new(), |ci| format!("{ci:.6}")),
            c.change.n.to_string(),
            detectable(&c.change).map_or(String::new(), |d| format!("{d:.6}")),
            significant(&c.change),
            from_values,
            Some(c.corrected_half)
                .filter(|h| h.is_finite())
                .map_or(String::new(), |h| format!("{h:.6}")),
            format!("{:.6}", c.p_holm),
            c.signs.above.to_string(),
            c.signs.below.to_string(),
            format!("{:.6}", c.p_sign_holm),
            c.direction().to_string(),
        ]);
    }
    t.csv()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::penalty::penalty_rows;
    use crate::study::setting::tests::{keyed, setting};

    /// tttt and sppp at lr 0.001 (sppp 0.02 better, seeds 1 to 3) and each at its own
    /// best (sppp 0.01 better, seeds 1 and 2, given first): one change, from the untuned
    /// setting (its label naming the rate) to the tuned one, +0.01 on the two seeds both
    /// have.
    #[test]
    fn a_penalty_changes_from_the_untuned_setting_to_the_tuned_one() {
        let fixed = Setting {
            rest: keyed("tp:2 learning_rate:0.001"),
            ..setting(2)
        };
        let tuned = Setting {
            rest: keyed("tp:2"),
            tuned: vec!["learning_rate".into()],
            ..setting(2)
        };
        let run = |s: &Setting, v: &str, seed: u64, loss: f64| PenaltyRun {
            setting: s.clone(),
            variant: Variant::parse(v).unwrap(),
            seed,
            final_val: loss,
            syncs: 0,
            exposed_syncs: 0,
            p_run: None,
            train_seconds: None,
            machine: None,
        };
        let mut runs = Vec::new();
        for seed in [1, 2] {
            let x = seed as f64 * 0.001;
            runs.push(run(&tuned, "tttt", seed, 1.80 + x));
            runs.push(run(&tuned, "sppp", seed, 1.79 + x));
        }
        for seed in [1, 2, 3] {
            let x = seed as f64 * 0.003;
            runs.push(run(&fixed, "tttt", seed, 1.90 + x));
            runs.push(run(&fixed, "sppp", seed, 1.88 + x));
        }
        let rows = penalty_rows(&runs, None);
        let changes = penalty_changes(&runs, &rows);
        assert_eq!(changes.len(), 1, "{changes:?}");
        let c = &changes[0];
        assert_eq!((c.axis, c.variant.as_str()), (Axis::Tuning, "sppp"));
        assert!(c.from.ends_with(", learning_rate 0.001"), "{}", c.from);
        assert!(c.to.ends_with("learning_rate tuned"), "{}", c.to);
        assert_eq!(c.change.n, 2);
        assert!((c.from_penalty + 0.02).abs() < 1e-9 && (c.to_penalty + 0.01).abs() < 1e-9);
        assert!((c.change.mean - 0.01).abs() < 1e-9, "{:?}", c.change);
        let table = Table::from_csv(&csv(&changes)).unwrap();
        assert_eq!(table.rows()[0][0], "tuning");
        let from_values = table
            .header()
            .iter()
            .position(|h| h == "from_values")
            .unwrap();
        assert_eq!(table.rows()[0][from_values], "learning_rate 0.001");
    }

    #[test]
    fn layouts_match_exactly_at_one_depth_and_stretched_across_depths() {
        let same = |a: &str, b: &str, depth| {
            let v = |n| super::Variant::parse(n).unwrap();
            same_layout(&v(a), &v(b), depth)
        };
        assert!(same("tstt", "tstt", true));
        assert!(!same("tstt", "ttst", true));
        assert!(same("sppp", "sppppp", false));
        assert!(same("tttt", "tttttt", false));
        assert!(same("sppp+int8", "sppppp+int8", false));
        assert!(!same("sppp", "sppppp+int8", false));
        assert!(!same("sppp", "pppppp", false));
        assert!(!same("llll", "tttttt", false));
        // Spelled with repeats: the same layers, so the same layout.
        assert!(same("12xs", "ssssssssssss", true));
        assert!(same("4xt", "tttt", true));
        assert!(!same("3xsppp", "s11xp", true));
        assert!(same("tttt", "12xt", false));
        assert!(same("ssss", "12xs", false));
        assert!(same("sppp", "s11xp", false));
        assert!(same("pppp", "12xp", false));
        assert!(same("llll+int8", "12xl+int8", false));
        assert!(!same("sppp", "3xsppp", false));
        assert!(!same("sppp", "6x(sp)", false));
    }
}
