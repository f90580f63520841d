//! What makes a study's runs comparable: everything in their configuration but the
//! layout, the compression and the seed ([`Setting`]), and the one axis along which two
//! settings differ, if they differ along one alone.

use crate::analysis::runs::ReplicateKey;
use crate::config::RunConfig;
use anyhow::Result;
use std::collections::BTreeMap;

/// An axis along which a study's settings differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Axis {
    /// The TP degree N.
    Tp,
    /// The training length (iterations: tokens, at one batch and block size).
    Length,
    /// The width C (n_embd), at the same layers and heads.
    Width,
    /// The layers, at the same width and heads.
    Depth,
    /// The heads, at the same width and layers.
    Heads,
    /// Several of layers, width and heads at once.
    Model,
    /// The width and the TP degree together at the same width per rank C/N (each rank's
    /// private path as wide): whether C/N alone predicts a penalty.
    WidthPerRank,
    /// Tuning: every layout at one value of some config keys, against each layout at its
    /// own best value of them (the untuned answer against the tuned one).
    Tuning,
}

impl Axis {
    /// The axis along which settings whose config keys `differing` differ (every other
    /// key equal) lie, if one: `per_rank_equal` says whether their width per TP rank is.
    fn of_keys(differing: &[&str], per_rank_equal: bool) -> Option<Self> {
        let model = ["n_layer", "n_embd", "n_head"];
        let all_in = |set: &[&str]| differing.iter().all(|k| set.contains(k));
        let has = |k: &str| differing.contains(&k);
        Some(match differing {
            [] => return None,
            ["tp"] => Axis::Tp,
            ["max_iters"] => Axis::Length,
            ["n_embd"] => Axis::Width,
            ["n_layer"] => Axis::Depth,
            ["n_head"] => Axis::Heads,
            _ if all_in(&model) => Axis::Model,
            _ if all_in(&["n_embd", "n_head", "tp"]) && has("n_embd") && has("tp") => {
                return per_rank_equal.then_some(Axis::WidthPerRank)
            }
            _ => return None,
        })
    }
}

impl std::fmt::Display for Axis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Axis::Tp => "tp",
            Axis::Length => "length",
            Axis::Width => "width",
            Axis::Depth => "depth",
            Axis::Heads => "heads",
            Axis::Model => "model",
            Axis::WidthPerRank => "width and tp at equal C/N",
            Axis::Tuning => "tuning",
        })
    }
}

/// Everything that makes runs comparable but the pattern, the compression and the seed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Setting {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub tp: usize,
    pub iters: usize,
    /// What it trained on (`shakespeare_char`, `names`, `text`).
    pub dataset: String,
    /// The config keys each layout of the setting ran at its own best value of
    /// ([`crate::study::tuning`]); empty where every layout ran at the same values.
    pub tuned: Vec<String>,
    /// The rest of the config, key by key (the layout, the compression, the seed and the
    /// tuned keys blank).
    pub(crate) rest: BTreeMap<String, String>,
    /// Where the tuned keys' values came from.
    pub chosen_by: ChosenBy,
}

/// Who chose a setting's per-layout values of its tuned keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChosenBy {
    /// Its own selection runs (a tuned sweep).
    #[default]
    Tuning,
    /// Another setting's tuning (a sweep's `tune.from`: the 12-layer rate at 6 layers,
    /// the 2000-iteration rate at 6000), not tuned in this one.
    Borrowed,
    /// By hand (`tp-plot --penalty --each-at KEY`): each layout at the value its runs
    /// were given, e.g. a check at another rate; exploratory.
    Hand,
}

impl ChosenBy {
    /// `tuned`, `borrowed`, `picked by hand`: how a label says it.
    pub fn word(self) -> &'static str {
        match self {
            ChosenBy::Tuning => "tuned",
            ChosenBy::Borrowed => "borrowed",
            ChosenBy::Hand => "picked by hand",
        }
    }
}

impl Setting {
    pub fn of(cfg: &RunConfig) -> Result<Self> {
        Self::tuned(cfg, &[])
    }

    /// The setting of a run whose `tuned` keys were chosen for its layout: layouts at
    /// different values of them are compared, best against best.
    pub fn tuned(cfg: &RunConfig, tuned: &[String]) -> Result<Self> {
        // Replicate groups that differ only in pattern, and compression not either.
        let mut c = cfg.clone();
        c.parallel.comm_dtype = Default::default();
        let mut rest = ReplicateKey::without_pattern(&c)?.into_keys();
        for k in tuned {
            rest.remove(k);
        }
        Ok(Self {
            n_layer: cfg.model.arch.n_layer,
            n_embd: cfg.model.arch.n_embd,
            n_head: cfg.model.arch.n_head,
            tp: cfg.parallel.tp,
            iters: cfg.optim.max_iters,
            dataset: cfg.model.dataset.clone(),
            tuned: tuned.to_vec(),
            rest,
            chosen_by: ChosenBy::Tuning,
        })
    }

    /// The model's shape: layers x width / heads.
    pub fn model(&self) -> String {
        format!("{}x{}/{}h", self.n_layer, self.n_embd, self.n_head)
    }

    /// `12x128/4h, tp 2, 2000 it, shakespeare_char`, and `, learning_rate tuned` where
    /// each layout ran at its own best (`, learning_rate borrowed` where that best was
    /// chosen in another setting, `picked by hand` where by hand).
    pub fn label(&self) -> String {
        let tuned = match self.tuned.is_empty() {
            true => String::new(),
            false => format!(", {} {}", self.tuned.join(" and "), self.chosen_by.word()),
        };
        format!(
            "{}, tp {}, {} it, {}{tuned}",
            self.model(),
            self.tp,
            self.iters,
            self.dataset
        )
    }

    /// The one axis along which `other` differs from this setting, if it differs along
    /// exactly one and in nothing else, so that a penalty's change from one to the other
    /// is the axis's effect.
    pub fn axis_to(&self, other: &Setting) -> Option<Axis> {
        if self.tuned != other.tuned {
            return self.tuning_to(other);
        }
        let mut differing: Vec<&str> = self
            .rest
            .keys()
            .chain(other.rest.keys())
            .filter(|k| self.rest.get(*k) != other.rest.get(*k))
            .map(String::as_str)
            .collect();
        differing.sort();
        differing.dedup();
        Axis::of_keys(&differing, self.width_per_rank() == other.width_per_rank())
    }

    /// C/N: the width each TP rank's share of a block's hidden units scales with.
    pub fn width_per_rank(&self) -> usize {
        self.n_embd / self.tp.max(1)
    }

    /// [`Axis::Tuning`] where one of the two settings ran every layout at one value of
    /// the keys that the other tuned layout by layout, and they agree in everything else.
    fn tuning_to(&self, other: &Setting) -> Option<Axis> {
        let (fixed, tuned) = match (self.tuned.is_empty(), other.tuned.is_empty()) {
            (true, false) => (self, other),
            (false, true) => (other, self),
            _ => return None,
        };
        let mut rest = fixed.rest.clone();
        for k in &tuned.tuned {
            rest.remove(k)?;
        }
        (rest == tuned.rest).then_some(Axis::Tuning)
    }

    /// The values of `keys` this setting ran every layout at, as `learning_rate 0.001`
    /// (the untuned side of an [`Axis::Tuning`] change).
    pub fn values_of(&self, keys: &[String]) -> String {
        let value = |k: &String| self.rest.get(k).map(|v| format!("{k} {v}"));
        keys.iter().filter_map(value).collect::<Vec<_>>().join(", ")
    }

    /// The config keys that tell this setting from `others` (all of them settings that
    /// share its label), as `key: value; ...`.
    pub(crate) fn differences(&self, others: &[&Setting]) -> String {
        let differs = |k: &String, v: &String| others.iter().any(|o| o.rest.get(k) != Some(v));
        let lines = self.rest.iter().filter(|(k, v)| differs(k, v));
        lines
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `key:value key:value` as a setting's keys.
    pub(crate) fn keyed(pairs: &str) -> BTreeMap<String, String> {
        let pair = |kv: &str| {
            let (k, v) = kv.split_once(':').expect("key:value");
            (k.to_string(), v.to_string())
        };
        pairs.split_whitespace().map(pair).collect()
    }

    /// Mini's setting at `tp`, 2000 iterations, the rest of its config blank (the study
    /// tables' unit tests).
    pub(crate) fn setting(tp: usize) -> Setting {
        Setting {
            n_layer: 4,
            n_embd: 128,
            n_head: 4,
            tp,
            iters: 2000,
            dataset: "shakespeare_char".into(),
            tuned: Vec::new(),
            rest: Default::default(),
            chosen_by: ChosenBy::Tuning,
        }
    }

    /// Settings are compared along an axis only when they differ along that one alone.
    #[test]
    fn a_setting_differs_from_another_along_one_axis_or_none() {
        let of = |pairs: &str| Setting {
            rest: keyed(pairs),
            ..setting(2)
        };
        let base = of("n_layer:4 n_head:4 tp:2 max_iters:2000 seed:0");
        let axis = |other: &str| base.axis_to(&of(other));
        assert_eq!(
            axis("n_layer:4 n_head:4 tp:8 max_iters:2000 seed:0"),
            Some(Axis::Tp)
        );
        assert_eq!(
            axis("n_layer:4 n_head:4 tp:2 max_iters:6000 seed:0"),
            Some(Axis::Length)
        );
        assert_eq!(
            axis("n_layer:6 n_head:8 tp:2 max_iters:2000 seed:0"),
            Some(Axis::Model)
        );
        assert_eq!(
            axis("n_layer:6 n_head:4 tp:2 max_iters:2000 seed:0"),
            Some(Axis::Depth)
        );
        assert_eq!(
            axis("n_layer:4 n_head:8 tp:2 max_iters:2000 seed:0"),
            Some(Axis::Heads)
        );
        assert_eq!(axis("n_layer:6 n_head:4 tp:4 max_iters:2000 seed:0"), None);
        assert_eq!(
            axis("n_layer:4 n_head:4 tp:8 max_iters:2000 seed:0 lr:1"),
            None
        );
        assert_eq!(axis("n_layer:4 n_head:4 tp:2 max_iters:2000 seed:0"), None);
    }

    /// Width alone is the width axis; width and TP degree together lie on one axis only
    /// where the width per rank C/N is the same on both sides (12 x 128 at tp 2 and
    /// 12 x 256 at tp 4: C/N 64), the question whether C/N alone predicts a penalty.
    #[test]
    fn width_is_an_axis_and_width_with_degree_one_at_equal_width_per_rank() {
        let of = |n_embd: usize, n_head: usize, tp: usize| Setting {
            n_embd,
            n_head,
            tp,
            rest: keyed(&format!(
                "n_embd:{n_embd} n_head:{n_head} tp:{tp} max_iters:2000"
            )),
            ..setting(tp)
        };
        assert_eq!(of(128, 4, 2).axis_to(&of(256, 4, 2)), Some(Axis::Width));
        assert_eq!(of(128, 4, 2).axis_to(&of(256, 8, 2)), Some(Axis::Model));
        assert_eq!(
            of(128, 4, 2).axis_to(&of(256, 8, 4)),
            Some(Axis::WidthPerRank)
        );
        assert_eq!(
            of(128, 8, 2).axis_to(&of(256, 8, 4)),
            Some(Axis::WidthPerRank)
        );
        assert_eq!(
            of(128, 4, 2).axis_to(&of(256, 4, 8)),
            None,
            "C/N 64 against 32"
        );
        assert_eq!(of(128, 8, 2).width_per_rank(), 64);
    }

    /// A setting with the learning rate tuned per layout lies on the tuning axis from the
    /// one that ran every layout at one learning rate, either way round, when nothing
    /// else differs; and not from one at another length, nor from another tuned one.
    #[test]
    fn the_untuned_setting_lies_on_the_tuning_axis_from_the_tuned_one() {
        let of = |pairs: &str, tuned: &[&str]| Setting {
            rest: keyed(pairs),
            tuned: tuned.iter().map(|k| k.to_string()).collect(),
            ..setting(2)
        };
        let fixed = of("tp:2 max_iters:2000 learning_rate:0.001", &[]);
        let tuned = of("tp:2 max_iters:2000", &["learning_rate"]);
        assert_eq!(fixed.axis_to(&tuned), Some(Axis::Tuning));
        assert_eq!(tuned.axis_to(&fixed), Some(Axis::Tuning));
        let longer = of("tp:2 max_iters:6000 learning_rate:0.001", &[]);
        assert_eq!(longer.axis_to(&tuned), None);
        let other_keys = of("tp:2 max_iters:2000", &["warmup_iters"]);
        assert_eq!(other_keys.axis_to(&tuned), None);
        assert_eq!(fixed.values_of(&tuned.tuned), "learning_rate 0.001");
    }
}
