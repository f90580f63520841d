//! A parsed pattern: one block kind per layer, and what the layout implies — its stages
//! (each maximal run of `p` or `l` blocks is one), the synchronisations a forward pass
//! makes and those a rank waits for.

use super::kind::{BlockKind, Syncs};
use super::pattern::{parse, PatternError};

/// A parsed pattern: the source text and one kind per layer. In a config it is the text
/// as typed, parsed once when the config is read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BlockLayout {
    pub pattern: String,
    pub kinds: Vec<BlockKind>,
}

impl BlockLayout {
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let kinds = parse(pattern)?;
        Ok(Self {
            pattern: pattern.to_string(),
            kinds,
        })
    }
    /// The pattern as typed (`3xsppp`).
    pub fn as_str(&self) -> &str {
        &self.pattern
    }
    /// That a model's `n_layer` is this layout's depth: the one check and its one message
    /// (the config's validation and the model's build both ask it).
    pub fn agrees_with_n_layer(&self, n_layer: usize) -> Result<(), String> {
        if self.n_layer() == n_layer {
            return Ok(());
        }
        Err(format!(
            "pattern \"{}\" has {} layers but n_layer is {n_layer}: make them agree (or leave n_layer unset)",
            self.pattern,
            self.n_layer()
        ))
    }

    pub fn n_layer(&self) -> usize {
        self.kinds.len()
    }
    /// The expanded layout, one letter per layer.
    pub fn expanded(&self) -> String {
        self.kinds.iter().map(|k| k.letter()).collect()
    }
    /// Maximal runs of consecutive `p` blocks as (first layer, length).
    pub fn p_runs(&self) -> Vec<(usize, usize)> {
        self.runs_of(BlockKind::P)
    }
    /// Maximal runs of consecutive `p` or `l` blocks as (first layer, length).
    pub fn runs_of(&self, kind: BlockKind) -> Vec<(usize, usize)> {
        let stages = self.stages().into_iter();
        stages
            .filter(|s| s.0 == kind)
            .map(|(_, first, len)| (first, len))
            .collect()
    }
    /// The layout as the block stack builds it: `t` and `s` blocks one by one, each
    /// maximal run of `p` or `l` blocks as one stage; (kind, first layer, length).
    pub fn stages(&self) -> Vec<(BlockKind, usize, usize)> {
        let (kinds, mut out, mut i) = (&self.kinds, Vec::new(), 0);
        while i < kinds.len() {
            let kind = kinds[i];
            let len = match kind.staged_by_run() {
                false => 1,
                true => kinds[i..].iter().take_while(|k| **k == kind).count(),
            };
            out.push((kind, i, len));
            i += len;
        }
        out
    }
    /// The length of the p runs of a layout of `s` and `p` blocks whose p runs are all
    /// equally long (0 for all `s`): `12xs` 0, `4x(spp)` 2, `s11xp` 11, `12xp` 12.
    pub fn uniform_p_run(&self) -> Option<usize> {
        if self
            .kinds
            .iter()
            .any(|&k| k != BlockKind::S && k != BlockKind::P)
        {
            return None;
        }
        let runs = self.p_runs();
        let k = runs.first().map_or(0, |r| r.1);
        runs.iter().all(|r| r.1 == k).then_some(k)
    }

    /// Why this layout at `tp` computes another function of the same weights than
    /// `from` at `from_tp` (a model taken from one to the other), or `None` if it does
    /// not: the kinds must agree layer by layer, and where s or p blocks are, so must the
    /// tp (t and l compute the same function at every tp; s and p do not).
    pub fn other_function_than(
        &self,
        tp: usize,
        from: &BlockLayout,
        from_tp: usize,
    ) -> Option<String> {
        let differ = self
            .kinds
            .iter()
            .zip(&from.kinds)
            .filter(|(a, b)| a != b)
            .count();
        if differ > 0 {
            return Some(format!(
                "its layer kinds differ from {}'s at {differ} of {} layers",
                from.pattern,
                self.kinds.len()
            ));
        }
        (self.depends_on_tp() && tp != from_tp).then(|| {
            format!("its s/p blocks compute another function at tp {tp} than at tp {from_tp}")
        })
    }

    /// blocks.md's count: `2 * count(t) + 2 * count(l) + count(s) + number of maximal
    /// p-runs`, from each kind's [`BlockKind::syncs`].
    pub fn forward_allreduces(&self) -> usize {
        self.count(BlockKind::syncs)
    }

    /// Forward all-reduces a rank waits for with nothing to compute meanwhile: `t`'s two,
    /// `s`'s one, one per p-run, and one per maximal run of `l` blocks (its last MLP sum,
    /// which no module follows inside the run; every other `l` all-reduce runs while the
    /// next module computes). Equal to [`BlockLayout::forward_allreduces`] without `l`.
    pub fn exposed_allreduces(&self) -> usize {
        self.count(BlockKind::exposed_syncs)
    }

    /// Whether the layout computes another function at another tp (some kind does).
    pub fn depends_on_tp(&self) -> bool {
        self.kinds.iter().any(|k| k.depends_on_tp())
    }

    /// Forward all-reduces in units of a whole stream's elements: each all-reduce
    /// weighted by its kind's `sync_width` (the planner's bytes).
    pub fn forward_allreduce_widths(&self) -> usize {
        let mut total = 0;
        for (i, k) in self.kinds.iter().enumerate() {
            total += Self::at(self.kinds[..i].last(), *k, k.syncs()) * k.spec().sync_width;
        }
        total
    }

    /// A per-kind count over the layout: per block, or per maximal run of the kind.
    fn count(&self, of: fn(BlockKind) -> Syncs) -> usize {
        let mut total = 0;
        for (i, k) in self.kinds.iter().enumerate() {
            total += Self::at(self.kinds[..i].last(), *k, of(*k));
        }
        total
    }

    /// What a block of kind `k` after one of kind `before` adds to a count of `syncs`.
    fn at(before: Option<&BlockKind>, k: BlockKind, syncs: Syncs) -> usize {
        let run_starts = before != Some(&k);
        match syncs {
            Syncs::PerBlock(n) => n,
            Syncs::PerRun(n) if run_starts => n,
            Syncs::PerRun(_) => 0,
        }
    }
}

impl TryFrom<String> for BlockLayout {
    type Error = PatternError;
    fn try_from(pattern: String) -> Result<Self, PatternError> {
        Self::parse(&pattern)
    }
}

impl From<BlockLayout> for String {
    fn from(layout: BlockLayout) -> String {
        layout.pattern
    }
}

/// The pattern as typed (`3xsppp`).
impl std::fmt::Display for BlockLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_names_why_it_computes_another_function_of_the_same_weights() {
        let l = |p: &str| BlockLayout::parse(p).unwrap();
        assert_eq!(l("3xsppp").other_function_than(2, &l("3xsppp"), 2), None);
        assert_eq!(l("12xt").other_function_than(4, &l("12xt"), 1), None);
        assert_eq!(l("llll").other_function_than(1, &l("llll"), 2), None);
        let kinds = l("12xt").other_function_than(2, &l("3xsppp"), 2).unwrap();
        assert!(
            kinds.contains("differ from 3xsppp's at 12 of 12 layers"),
            "{kinds}"
        );
        let tp = l("sppp").other_function_than(4, &l("sppp"), 2).unwrap();
        assert!(tp.contains("at tp 4 than at tp 2"), "{tp}");
    }

    #[test]
    fn blocks_md_examples_have_the_stated_forward_allreduce_counts() {
        for (p, n) in [
            ("tttt", 8),
            ("tstt", 7),
            ("sppp", 2),
            ("pppp", 1),
            ("ssss", 4),
            ("spps", 3),
            ("3xsppp", 6),
            ("12xt", 24),
            ("12xs", 12),
            ("6x(ts)", 18),
            ("4x(tss)", 16),
            ("4x(spp)", 8),
            ("2x(s5xp)", 4),
            ("6x(sp)", 12),
            ("llll", 8),
            ("tllp", 7),
            ("lsll", 7),
            ("2x(ll)p", 9),
        ] {
            assert_eq!(
                BlockLayout::parse(p).unwrap().forward_allreduces(),
                n,
                "{p}"
            );
        }
    }

    /// A run of l blocks leaves one all-reduce exposed (its last MLP sum); without l the
    /// exposed count is the forward count.
    #[test]
    fn exposed_allreduces_count_one_per_ladder_run() {
        for (p, forward, exposed) in [
            ("tttt", 8, 8),
            ("llll", 8, 1),
            ("tttl", 8, 7),
            ("ltlt", 8, 6),
            ("tllp", 7, 4),
            ("sppp", 2, 2),
        ] {
            let l = BlockLayout::parse(p).unwrap();
            assert_eq!(
                (l.forward_allreduces(), l.exposed_allreduces()),
                (forward, exposed),
                "{p}"
            );
        }
    }

    #[test]
    fn ladder_runs_are_maximal_and_stages_are_t_s_blocks_and_runs() {
        assert_eq!(
            BlockLayout::parse("tllpl").unwrap().runs_of(BlockKind::L),
            vec![(1, 2), (4, 1)]
        );
        let stages = BlockLayout::parse("tsppll").unwrap().stages();
        let (t, s, p, l) = (BlockKind::T, BlockKind::S, BlockKind::P, BlockKind::L);
        assert_eq!(stages, vec![(t, 0, 1), (s, 1, 1), (p, 2, 2), (l, 4, 2)]);
    }

    #[test]
    fn p_runs_are_maximal_including_runs_of_length_one() {
        let l = BlockLayout::parse("pspp").unwrap();
        assert_eq!(l.p_runs(), vec![(0, 1), (2, 2)]);
        let l = BlockLayout::parse("tpst").unwrap();
        assert_eq!(l.p_runs(), vec![(1, 1)]);
    }
}
