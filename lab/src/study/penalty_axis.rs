//! The penalty along each axis of a study (`penalty_by_axis.md`): for every axis its
//! settings differ along (width, TP degree, width and degree at equal C/N, length, depth,
//! ...), each layout's penalty at each value with the interval corrected over its
//! setting's layouts, and the change between the values, paired by seed, with the
//! interval and p-values corrected over the axis's changes and the exact sign test beside
//! the t-test — the statement "the penalty grows / shrinks / does not change with width"
//! with its evidence. The numbers are [`super::penalty`]'s rows and
//! [`super::penalty_change`]'s changes; this file only arranges them by axis.

use super::penalty::PenaltyRow;
use super::penalty_change::PenaltyChange;
use super::setting::{Axis, Setting};
use crate::analysis::table::Table;

/// A setting's value along `axis`, as the axis's table names it.
pub fn value_on(axis: Axis, s: &Setting) -> String {
    match axis {
        Axis::Tp => format!("N {}", s.tp),
        Axis::Length => format!("{} it", s.iters),
        Axis::Width => format!("C {}", s.n_embd),
        Axis::Depth => format!("{} layers", s.n_layer),
        Axis::Heads => format!("{} heads", s.n_head),
        Axis::Model => s.model(),
        Axis::WidthPerRank => format!("C {}, N {} (C/N {})", s.n_embd, s.tp, s.width_per_rank()),
        Axis::Tuning => match s.tuned.is_empty() {
            true => "one value for all".into(),
            false => format!("{} tuned", s.tuned.join(", ")),
        },
    }
}

/// A row's penalty with its interval corrected over its setting's layouts:
/// `+0.0123 (-0.0010 .. +0.0256)`.
fn penalty_cell(row: Option<&PenaltyRow>) -> String {
    let Some((d, h)) = row.and_then(|r| Some((r.diff?, r.corrected_half?))) else {
        return "-".into();
    };
    match h.is_finite() {
        true => format!(
            "{:+.4} ({:+.4} .. {:+.4}), n {}",
            d.mean,
            d.mean - h,
            d.mean + h,
            d.n
        ),
        false => format!("{:+.4}, n {}", d.mean, d.n),
    }
}

/// The penalty row of the layout spelled `variant` (one side of a change's `a -> b`)
/// in `setting`.
fn row_of<'a>(rows: &'a [PenaltyRow], setting: &Setting, variant: &str) -> Option<&'a PenaltyRow> {
    rows.iter()
        .find(|r| &r.setting == setting && r.variant.to_string() == variant)
}

/// The sides of a change's layout name: `sppp -> s11xp`, or one name for both.
fn sides(variant: &str) -> (&str, &str) {
    variant.split_once(" -> ").unwrap_or((variant, variant))
}

/// The table of one axis.
fn axis_table(axis: Axis, changes: &[&PenaltyChange], rows: &[PenaltyRow]) -> Table {
    let mut t = Table::new([
        "pattern",
        "paired with",
        "from",
        "penalty there (Bonferroni), n",
        "to",
        "penalty here (Bonferroni), n",
        "change (Bonferroni over the axis)",
        "pairs",
        "p (Holm)",
        "signs, sign test p (Holm)",
        "direction",
    ]);
    for c in changes {
        let (va, vb) = sides(&c.variant);
        let corrected = match c.corrected_half.is_finite() {
            true => format!(
                "{:+.4} ({:+.4} .. {:+.4})",
                c.change.mean,
                c.change.mean - c.corrected_half,
                c.change.mean + c.corrected_half
            ),
            false => format!("{:+.4} (-)", c.change.mean),
        };
        t.row([
            c.variant.clone(),
            c.baseline.clone(),
            value_on(axis, &c.from_setting),
            penalty_cell(row_of(rows, &c.from_setting, va)),
            value_on(axis, &c.to_setting),
            penalty_cell(row_of(rows, &c.to_setting, vb)),
            corrected,
            c.change.n.to_string(),
            format!("{:.3}", c.p_holm),
            format!("{}+ {}- {:.3}", c.signs.above, c.signs.below, c.p_sign_holm),
            c.direction().to_string(),
        ]);
    }
    t
}

/// What the settings along an axis share, as the section names it: the first change's
/// `from` label with the axis's own value left for the rows.
fn section_title(axis: Axis, first: &PenaltyChange) -> String {
    format!("{axis} (from {} to {})", first.from, first.to)
}

/// `penalty_by_axis.md`: a section per axis the changes lie on (a sub-table per pair of
/// settings), with how to read it; `None` where no change lies on an axis.
pub fn markdown(changes: &[PenaltyChange], rows: &[PenaltyRow]) -> Option<String> {
    if changes.is_empty() {
        return None;
    }
    let mut axes: Vec<Axis> = changes.iter().map(|c| c.axis).collect();
    axes.sort();
    axes.dedup();
    let mut out = String::from(
        "The penalty along each axis of the study: per pair of settings that differ along that axis alone, each layout's penalty (its final val loss less its baseline's, paired by seed) at both values, each with its interval corrected over the layouts of its setting (Bonferroni), and the change between them, paired by seed, with its interval corrected over every change the study gives on that axis (Bonferroni), its t-test p and the exact sign test's p (how many pairs grew and how many shrank), both Holm-adjusted over the same changes. `direction` is what survives that correction: the penalty grows or shrinks along the axis, or no change is detected (the interval says how large a change the pairs leave possible). A tuned setting compares each layout at its own best value; one whose values came from another setting (`from` in the row's tuned note of penalty.md) borrowed them.\n",
    );
    for axis in axes {
        let on: Vec<&PenaltyChange> = changes.iter().filter(|c| c.axis == axis).collect();
        let mut pairs: Vec<(&Setting, &Setting)> = Vec::new();
        for c in &on {
            if !pairs.contains(&(&c.from_setting, &c.to_setting)) {
                pairs.push((&c.from_setting, &c.to_setting));
            }
        }
        out.push_str(&format!("\n## {axis}: {} changes\n", on.len()));
        for (from, to) in pairs {
            let these: Vec<&PenaltyChange> = on
                .iter()
                .copied()
                .filter(|c| &c.from_setting == from && &c.to_setting == to)
                .collect();
            out.push_str(&format!(
                "\n### {}\n\n{}",
                section_title(axis, these[0]),
                axis_table(axis, &these, rows).markdown()
            ));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Variant;
    use crate::study::penalty::{penalty_rows, PenaltyRun};
    use crate::study::penalty_change::penalty_changes;
    use crate::study::setting::tests::{keyed, setting};

    /// Width 128 and 256 at tp 2 (sppp 0.019 better than tttt at 128, 0.012 worse at
    /// 256, six seeds, the odd ones further off): one change on the width axis, +0.031,
    /// grows, all six pairs positive (sign test 2/64 = 0.031); the penalties at both
    /// widths carry their corrected intervals.
    #[test]
    fn the_width_axis_says_the_penalty_grows_with_its_corrected_evidence() {
        let at = |n_embd: usize| Setting {
            n_embd,
            rest: keyed(&format!("n_embd:{n_embd} tp:2 max_iters:2000")),
            ..setting(2)
        };
        let mut runs = Vec::new();
        for (n_embd, gap, odd) in [(128, -0.02, 0.002), (256, 0.01, 0.004)] {
            for seed in 1..=6u64 {
                let noise = 0.001 * seed as f64;
                let sppp = 1.9 + gap + noise + odd * (seed % 2) as f64;
                for (v, loss) in [("tttt", 1.9 + noise), ("sppp", sppp)] {
                    runs.push(PenaltyRun {
                        setting: at(n_embd),
                        variant: Variant::parse(v).unwrap(),
                        seed,
                        final_val: loss,
                        syncs: 2,
                        exposed_syncs: 2,
                        p_run: None,
                        train_seconds: None,
                        machine: None,
                    });
                }
            }
        }
        let rows = penalty_rows(&runs, None);
        let changes = penalty_changes(&runs, &rows);
        assert_eq!(changes.len(), 1);
        let c = &changes[0];
        assert_eq!(c.axis, Axis::Width);
        assert!((c.change.mean - 0.031).abs() < 1e-9, "{c:?}");
        assert_eq!((c.signs.above, c.signs.below), (6, 0));
        assert!((c.p_sign_holm - 0.03125).abs() < 1e-12);
        assert_eq!(c.direction(), "grows");
        let md = markdown(&changes, &rows).unwrap();
        assert!(md.contains("## width: 1 changes"), "{md}");
        assert!(md.contains("| sppp | tttt | C 128 | -0.0190 ("), "{md}");
        assert!(md.contains("| C 256 | +0.0120 ("), "{md}");
        assert!(md.contains("| 6+ 0- 0.031 | grows |"), "{md}");
    }
}
