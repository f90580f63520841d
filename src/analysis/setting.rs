//! What makes a study's runs comparable: everything in their configuration but the
//! layout, the compression and the seed ([`Setting`]), and the one axis along which two
//! settings differ, if they differ along one alone.

use super::runs::ReplicateKey;
use crate::config::RunConfig;
use anyhow::Result;

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
    /// The rest of the config, for equality only.
    pub(crate) rest: String,
}

impl Setting {
    pub fn of(cfg: &RunConfig) -> Result<Self> {
        // Replicate groups that differ only in pattern, and compression not either.
        let mut c = cfg.clone();
        c.parallel.comm_dtype = Default::default();
        Ok(Self {
            n_layer: cfg.model.arch.n_layer,
            n_embd: cfg.model.arch.n_embd,
            n_head: cfg.model.arch.n_head,
            tp: cfg.parallel.tp,
            iters: cfg.optim.max_iters,
            dataset: cfg.model.dataset.clone(),
            rest: ReplicateKey::without_pattern(&c)?.yaml().to_string(),
        })
    }

    /// The model's shape: layers x width / heads.
    pub fn model(&self) -> String {
        format!("{}x{}/{}h", self.n_layer, self.n_embd, self.n_head)
    }

    pub fn label(&self) -> String {
        format!("{}, tp {}, {} it", self.model(), self.tp, self.iters)
    }

    /// The one axis along which `other` differs from this setting — `tp`, `length`
    /// (iterations) or `model` (layers, width, heads) — if it differs along exactly one
    /// and in nothing else, so that a penalty's change from one to the other is the
    /// axis's effect.
    pub fn axis_to(&self, other: &Setting) -> Option<&'static str> {
        let axis = |line: &str| match line.split(':').next().unwrap_or("") {
            "tp" => Some("tp"),
            "max_iters" => Some("length"),
            "n_layer" | "n_embd" | "n_head" => Some("model"),
            _ => None,
        };
        let (mine, theirs): (Vec<&str>, Vec<&str>) =
            (self.rest.lines().collect(), other.rest.lines().collect());
        let differing = mine
            .iter()
            .filter(|l| !theirs.contains(l))
            .chain(theirs.iter().filter(|l| !mine.contains(l)));
        let mut found = None;
        for line in differing {
            match (axis(line), found) {
                (None, _) => return None,
                (Some(a), Some(f)) if a != f => return None,
                (a, _) => found = a,
            }
        }
        found
    }

    /// The config lines that tell this setting from `others` (all of them settings that
    /// share its label), as `key: value; ...`.
    pub(crate) fn differences(&self, others: &[&Setting]) -> String {
        self.rest
            .lines()
            .filter(|l| others.iter().any(|o| !o.rest.lines().any(|m| m == *l)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(tp: usize) -> Setting {
        Setting {
            n_layer: 4,
            n_embd: 128,
            n_head: 4,
            tp,
            iters: 2000,
            dataset: "shakespeare_char".into(),
            rest: String::new(),
        }
    }

    /// Settings are compared along an axis only when they differ along that one alone.
    #[test]
    fn a_setting_differs_from_another_along_one_axis_or_none() {
        let of = |lines: &str| Setting {
            rest: lines.replace(' ', "\n"),
            ..setting(2)
        };
        let base = of("n_layer:4 n_head:4 tp:2 max_iters:2000 seed:0");
        let axis = |other: &str| base.axis_to(&of(other));
        assert_eq!(
            axis("n_layer:4 n_head:4 tp:8 max_iters:2000 seed:0"),
            Some("tp")
        );
        assert_eq!(
            axis("n_layer:4 n_head:4 tp:2 max_iters:6000 seed:0"),
            Some("length")
        );
        assert_eq!(
            axis("n_layer:6 n_head:8 tp:2 max_iters:2000 seed:0"),
            Some("model")
        );
        assert_eq!(axis("n_layer:6 n_head:4 tp:4 max_iters:2000 seed:0"), None);
        assert_eq!(
            axis("n_layer:4 n_head:4 tp:8 max_iters:2000 seed:0 lr:1"),
            None
        );
        assert_eq!(axis("n_layer:4 n_head:4 tp:2 max_iters:2000 seed:0"), None);
    }
}
