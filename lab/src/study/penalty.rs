//! The loss penalty of cutting synchronisations, as a study reads it: runs grouped by
//! **setting** (everything but the pattern, the compression and the seed: model, TP
//! degree, length, data), and in each setting every pattern's final val loss set against
//! the baseline pattern's (Megatron's all-`t` layout unless told otherwise), paired by
//! seed. One row per (setting, pattern): mean ± sd, n, the paired difference with its 95%
//! interval and the smallest difference the pairs could detect; its p-value adjusted by
//! Holm's method over the layouts compared with that baseline in that setting (one
//! family of comparisons), and, against a declared margin, whether the layout is
//! non-inferior (its one-sided bound, Bonferroni-corrected over the family, below the
//! margin). A tuned setting ([`crate::study::tuning`]) compares each layout at its own
//! best values.

pub use super::setting::Setting;
use crate::analysis::stats::{holm, paired_differences, Replicates, Signs};
use crate::config::Variant;
use crate::run_dir::{read_config, read_summary};
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// What the study needs of one finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct PenaltyRun {
    pub setting: Setting,
    /// The layout and what its activation sums travel in.
    pub variant: Variant,
    pub seed: u64,
    pub final_val: f64,
    /// Forward all-reduces per pass: blocks.md's count, and those a rank waits for with
    /// nothing to compute (a ladder hides the rest).
    pub syncs: usize,
    pub exposed_syncs: usize,
    /// The length of its p runs, for the `s`-then-`p` family
    /// ([`tp_harness::blocks::BlockLayout::uniform_p_run`]).
    pub p_run: Option<usize>,
    /// Its steps' wall time, steps x the median step (evaluations left out), if timed.
    pub train_seconds: Option<f64>,
    /// The machine its summary names (none for runs made before summaries kept it).
    pub machine: Option<String>,
}

impl PenaltyRun {
    /// The run in `dir`, if it finished (has a final val loss); `tuned`: the keys its
    /// study chose per layout (none for an untuned one), left out of its setting.
    pub fn load(dir: &Path, tuned: &[String]) -> Result<Option<Self>> {
        let cfg = read_config(dir)?;
        let Some(summary) = read_summary(dir)? else {
            return Ok(None);
        };
        let Some(final_val) = summary.final_val_loss else {
            return Ok(None);
        };
        let layout = cfg.layout();
        Ok(Some(Self {
            setting: Setting::tuned(&cfg, tuned)?,
            variant: cfg.variant(),
            seed: cfg.optim.seed,
            final_val: final_val as f64,
            syncs: layout.forward_allreduces(),
            exposed_syncs: layout.exposed_allreduces(),
            p_run: layout.uniform_p_run(),
            train_seconds: summary.step_ms.map(|ms| ms * summary.steps as f64 / 1e3),
            machine: summary.machine,
        }))
    }
}

/// One pattern in one setting.
#[derive(Debug, Clone, PartialEq)]
pub struct PenaltyRow {
    pub setting: Setting,
    /// The setting as tables name it: [`Setting::label`], and where settings share that,
    /// the config lines that tell them apart.
    pub setting_label: String,
    pub variant: Variant,
    pub syncs: usize,
    pub exposed_syncs: usize,
    pub p_run: Option<usize>,
    pub val: Replicates,
    /// The baseline it was paired with, and the paired differences (this − baseline);
    /// none for the baseline itself or where the setting has none.
    pub baseline: Option<Variant>,
    pub diff: Option<Replicates>,
    /// The runs' training time summed (those that recorded one), and the machines they
    /// were made on (distinct; `None`: not recorded).
    pub train_seconds: f64,
    pub machines: Vec<Option<String>>,
    /// How many of its runs each machine made (`None`: not recorded), machines sorted.
    pub runs_by_machine: Vec<(Option<String>, usize)>,
    /// The paired difference's p-value adjusted by Holm's method over the setting's
    /// layouts compared with the same baseline; `None` where there is no difference.
    pub p_holm: Option<f64>,
    /// The paired differences' signs, and the exact sign test's p-value adjusted by
    /// Holm's method over the same family: the distribution-free check beside the t-test
    /// where pairs are few.
    pub signs: Option<Signs>,
    pub p_sign_holm: Option<f64>,
    /// The half-width of the difference's two-sided interval at 1 - 0.05/m, Bonferroni over
    /// the same family: intervals that hold together, at 95%, for every layout compared.
    pub corrected_half: Option<f64>,
    /// Against the margin the table was asked for: the difference's one-sided upper
    /// bound, Bonferroni-corrected over the same family (at 1 - 0.05/m).
    pub upper_bound: Option<f64>,
    /// In a tuned setting: the value chosen for this layout and what was tried
    /// ([`crate::study::tuned_study::row_note`]).
    pub tuned: Option<String>,
}

/// The level every test and interval of the tables is at.
pub const ALPHA: f64 = 0.05;

/// Every (setting, pattern) of `runs`, settings in order, patterns by descending exposed
/// syncs.
/// `baseline`: the layout to pair with (default: the setting's all-`t` f32 layout). Runs
/// of one layout spelled differently (`4xt`, `tttt`) are one group.
pub fn penalty_rows(runs: &[PenaltyRun], baseline: Option<&Variant>) -> Vec<PenaltyRow> {
    let mut groups: BTreeMap<(&Setting, &Variant), Vec<&PenaltyRun>> = BTreeMap::new();
    for r in runs {
        groups.entry((&r.setting, &r.variant)).or_default().push(r);
    }
    let seeded = |v: &[&PenaltyRun]| v.iter().map(|r| (r.seed, r.final_val)).collect::<Vec<_>>();
    let base_of = |setting: &Setting| -> Option<&Variant> {
        groups
            .keys()
            .filter(|(s, _)| *s == setting)
            .find(|(_, v)| baseline.map_or(v.all_t(), |b| *v == b))
            .map(|(_, v)| *v)
    };
    let mut rows: Vec<PenaltyRow> = groups
        .iter()
        .filter_map(|(&(setting, variant), members)| {
            let losses = seeded(members);
            let val = Replicates::of(&losses.iter().map(|l| l.1).collect::<Vec<_>>())?;
            let base = base_of(setting).filter(|b| *b != variant);
            let diffs: Option<Vec<f64>> = base.map(|b| {
                let base_losses = seeded(&groups[&(setting, b)]);
                paired_differences(&losses, &base_losses)
            });
            let diff = diffs.as_deref().and_then(Replicates::of);
            let signs = diff.and(diffs.as_deref()).map(Signs::of);
            Some(PenaltyRow {
                setting: setting.clone(),
                setting_label: setting.label(),
                variant: variant.clone(),
                syncs: members[0].syncs,
                exposed_syncs: members[0].exposed_syncs,
                p_run: members[0].p_run,
                val,
                baseline: base.cloned(),
                diff,
                train_seconds: members.iter().filter_map(|r| r.train_seconds).sum(),
                machines: distinct(members.iter().map(|r| r.machine.clone())),
                runs_by_machine: distinct(members.iter().map(|r| r.machine.clone()))
                    .into_iter()
                    .map(|m| {
                        let n = members.iter().filter(|r| r.machine == m).count();
                        (m, n)
                    })
                    .collect(),
                p_holm: None,
                signs,
                p_sign_holm: None,
                upper_bound: None,
                corrected_half: None,
                tuned: None,
            })
        })
        .collect();
    correct_for_multiplicity(&mut rows);
    let settings: Vec<&Setting> = groups.keys().map(|(s, _)| *s).collect();
    for r in &mut rows {
        let twins: Vec<&Setting> = settings
            .iter()
            .copied()
            .filter(|s| **s != r.setting && s.label() == r.setting_label)
            .collect();
        if !twins.is_empty() {
            r.setting_label = format!("{} [{}]", r.setting_label, r.setting.differences(&twins));
        }
    }
    // A setting's rows by the synchronisations a rank waits for, most first (a ladder
    // then sits with the layouts that expose as few, not beside Megatron's).
    use std::cmp::Reverse as Desc;
    rows.sort_by_key(|r| {
        (
            r.setting.clone(),
            Desc(r.exposed_syncs),
            Desc(r.syncs),
            r.variant.clone(),
        )
    });
    rows
}

/// Holm's adjusted p-values and the Bonferroni-corrected bounds and intervals, per family:
/// the rows of one setting compared with one baseline.
fn correct_for_multiplicity(rows: &mut [PenaltyRow]) {
    let mut families: Vec<(Setting, Variant)> = Vec::new();
    for r in rows.iter() {
        if let (Some(b), Some(_)) = (&r.baseline, &r.diff) {
            if !families.contains(&(r.setting.clone(), b.clone())) {
                families.push((r.setting.clone(), b.clone()));
            }
        }
    }
    for (setting, base) in families {
        let members: Vec<usize> = (0..rows.len())
            .filter(|&i| {
                rows[i].setting == setting
                    && rows[i].baseline.as_ref() == Some(&base)
                    && rows[i].diff.is_some()
            })
            .collect();
        let p: Vec<f64> = members
            .iter()
            .map(|&i| rows[i].diff.map_or(1.0, |d| d.p_value()))
            .collect();
        let p_sign: Vec<f64> = members
            .iter()
            .map(|&i| rows[i].signs.map_or(1.0, |s| s.p_value()))
            .collect();
        let m = members.len() as f64;
        for ((&i, adjusted), sign) in members.iter().zip(holm(&p)).zip(holm(&p_sign)) {
            rows[i].p_holm = Some(adjusted);
            rows[i].p_sign_holm = Some(sign);
            rows[i].upper_bound = rows[i].diff.map(|d| d.upper_bound(ALPHA / m));
            rows[i].corrected_half = rows[i].diff.map(|d| d.half_width(ALPHA / m));
        }
    }
}

pub(crate) fn distinct<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.into_iter().collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::penalty_table::{csv, markdown};

    fn run(setting: &Setting, variant: &str, seed: u64, loss: f64, syncs: usize) -> PenaltyRun {
        PenaltyRun {
            setting: setting.clone(),
            variant: Variant::parse(variant).unwrap(),
            seed,
            final_val: loss,
            syncs,
            exposed_syncs: syncs,
            p_run: None,
            train_seconds: Some(60.0),
            machine: None,
        }
    }

    use crate::study::setting::tests::setting;

    /// Two settings; in each, pppp against tttt by seed (seed 9 has no tttt partner and
    /// is not paired), and tttt+int8 paired with the f32 tttt, not taken as the baseline.
    #[test]
    fn each_pattern_is_paired_by_seed_with_its_own_setting_s_all_t_baseline() {
        let (a, b) = (setting(2), setting(4));
        let runs = vec![
            run(&a, "tttt", 1, 1.90, 8),
            run(&a, "tttt", 2, 1.92, 8),
            run(&a, "tttt+int8", 1, 1.91, 8),
            run(&a, "tttt+int8", 2, 1.93, 8),
            run(&a, "pppp", 2, 1.95, 1),
            run(&a, "pppp", 1, 1.92, 1),
            run(&a, "pppp", 9, 1.99, 1),
            PenaltyRun {
                exposed_syncs: 1,
                ..run(&a, "llll", 1, 1.93, 8)
            },
            run(&b, "tttt", 1, 2.00, 8),
            run(&b, "pppp", 1, 2.10, 1),
        ];
        let rows = penalty_rows(&runs, None);
        let find = |s: &Setting, v: &str| {
            rows.iter()
                .find(|r| &r.setting == s && r.variant.to_string() == v)
                .unwrap()
        };
        assert_eq!(rows.len(), 6);
        let base = find(&a, "tttt");
        assert_eq!((base.baseline.clone(), base.diff), (None, None));
        let p = find(&a, "pppp");
        assert_eq!(p.val.n, 3);
        let d = p.diff.unwrap();
        // Pairs: seed 1 (1.92 - 1.90) and seed 2 (1.95 - 1.92): mean 0.025.
        assert_eq!(d.n, 2);
        assert!((d.mean - 0.025).abs() < 1e-12, "{d:?}");
        let q = find(&a, "tttt+int8");
        assert_eq!(q.baseline.as_ref().unwrap().to_string(), "tttt");
        assert!((q.diff.unwrap().mean - 0.01).abs() < 1e-12);
        let pb = find(&b, "pppp").diff.unwrap();
        assert!((pb.mean - 0.10).abs() < 1e-12 && pb.ci95.is_infinite());
        // A setting's rows by descending exposed synchronisations (the ladder's 8 hide
        // all but 1), then all of them.
        let order: Vec<String> = rows
            .iter()
            .filter(|r| r.setting == a)
            .map(|r| r.variant.to_string())
            .collect();
        assert_eq!(order, ["tttt", "tttt+int8", "llll", "pppp"]);
        let md = markdown(&rows, None);
        assert!(
            md.contains("| 4x128/4h, tp 2, 2000 it, shakespeare_char | pppp | 1 (1) | 3 |"),
            "{md}"
        );
        assert!(md.contains("+0.0250 (-0.0385 .. +0.0885)"), "{md}");
        // Corrected for setting a's family (int8, llll and pppp against tttt: m = 3), at
        // 1 - 0.05/3 two-sided; one degree of freedom has t's quantile in closed form,
        // tan(pi (q - 1/2)) = 38.188 at q = 1 - 0.05/6: 38.188 x 0.007071 / sqrt 2 = 0.1909.
        let m = rows
            .iter()
            .filter(|r| r.setting == a && r.diff.is_some())
            .count();
        assert_eq!(m, 3);
        let q = 1.0 - 0.05 / 6.0;
        let t = (std::f64::consts::PI * (q - 0.5)).tan();
        let half = p.corrected_half.unwrap();
        assert!((half - t * d.std / 2f64.sqrt()).abs() < 1e-3, "{half}");
        assert!((half - 0.1909).abs() < 1e-3, "{half}");
        assert!(md.contains("| -0.1659 .. +0.2159 |"), "{md}");
        let csv = csv(&rows);
        assert_eq!(csv.lines().count(), 7);
        assert!(
            csv.contains(
                "4,128,4,4,2000,pppp,1,1,1,2.100000,0.000000,tttt,0.100000,,1,,no,shakespeare_char"
            ),
            "{csv}"
        );
        // Settings that share a label are told apart by the config lines that differ.
        let lr = |v: &str| Setting {
            rest: crate::study::setting::tests::keyed(&format!("n_head:4 learning_rate:{v}")),
            ..setting(8)
        };
        let (c, d) = (lr("0.001"), lr("0.002"));
        let twins = penalty_rows(
            &[run(&c, "tttt", 1, 1.9, 8), run(&d, "tttt", 1, 1.8, 8)],
            None,
        );
        let labels: Vec<&str> = twins.iter().map(|r| r.setting_label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "4x128/4h, tp 8, 2000 it, shakespeare_char [learning_rate: 0.001]",
                "4x128/4h, tp 8, 2000 it, shakespeare_char [learning_rate: 0.002]"
            ]
        );
        // An explicit baseline replaces the all-t one.
        let pppp = Variant::parse("pppp").unwrap();
        let vs_p = penalty_rows(&runs, Some(&pppp));
        assert!(vs_p
            .iter()
            .filter(|r| r.variant.to_string() == "tttt")
            .all(|r| r.baseline.as_ref() == Some(&pppp)));
    }

    /// Runs of one layout spelled `4xt` and `tttt` are one pattern of the table: its n
    /// counts both, and pppp pairs with all four seeds (it was two groups, and tttt was
    /// "paired with 4xt" at +0.0000).
    #[test]
    fn runs_of_4xt_and_tttt_land_in_one_group() {
        let a = setting(2);
        let runs = vec![
            run(&a, "4xt", 1, 1.90, 8),
            run(&a, "4xt", 2, 1.92, 8),
            run(&a, "tttt", 3, 1.91, 8),
            run(&a, "tttt", 4, 1.93, 8),
            run(&a, "4x(p)", 1, 1.95, 1),
            run(&a, "pppp", 2, 1.96, 1),
            run(&a, "pppp", 3, 1.97, 1),
            run(&a, "pppp", 4, 1.98, 1),
        ];
        let rows = penalty_rows(&runs, None);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (t, p) = (&rows[0], &rows[1]);
        assert_eq!(
            (t.variant.to_string(), t.val.n, t.baseline.clone()),
            ("4xt".into(), 4, None)
        );
        assert_eq!(p.val.n, 4);
        assert_eq!(p.baseline.as_ref(), Some(&t.variant));
        let d = p.diff.unwrap();
        assert_eq!(d.n, 4);
        assert!((d.mean - 0.05).abs() < 1e-12, "{d:?}");
    }
}
