//! The block kinds and every fact that differs between them, each an exhaustive `match`:
//! a new kind fails to compile here (and in the block stack's dispatch) until each fact
//! is decided. docs/architecture.md, "Adding a block kind", lists the rest.

use super::params::BlockTags;
use super::{l, p, s, t};
use std::fmt;

/// Serialised (and parsed) as its pattern letter.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, strum::EnumIter,
)]
pub enum BlockKind {
    /// TPBlock: two forward all-reduces.
    #[serde(rename = "t")]
    T,
    /// SPDBlock: one forward all-reduce.
    #[serde(rename = "s")]
    S,
    /// ParallelBlock: one forward all-reduce per maximal run.
    #[serde(rename = "p")]
    P,
    /// LadderBlock: two forward all-reduces, each waited for one module later.
    #[serde(rename = "l")]
    L,
    /// Test-only: a t block whose MLP sum is left out, so each rank's stream keeps its
    /// own partial — the private-channel kind the replicated-activation check must catch
    /// (blocks/private_channel.rs).
    #[cfg(test)]
    #[serde(rename = "x")]
    X,
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

/// How many forward all-reduces a kind synchronises with (blocks.md's count): so many
/// per block, or one per maximal run of consecutive blocks of the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syncs {
    PerBlock(usize),
    PerRun(usize),
}

impl BlockKind {
    /// Its letter in a pattern.
    pub fn letter(self) -> char {
        match self {
            BlockKind::T => 't',
            BlockKind::S => 's',
            BlockKind::P => 'p',
            BlockKind::L => 'l',
            #[cfg(test)]
            BlockKind::X => 'x',
        }
    }

    /// Its name in blocks.md and a line of what it does (help and reports).
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            BlockKind::T => ("TPBlock", "Megatron-LM's block: 2 all-reduces"),
            BlockKind::S => ("SPDBlock", "sync-point drop: 1 all-reduce"),
            BlockKind::P => ("ParallelBlock", "1 all-reduce per run of p blocks"),
            BlockKind::L => (
                "LadderBlock",
                "2 all-reduces, each hidden behind the next module",
            ),
            #[cfg(test)]
            BlockKind::X => ("PrivateChannel", "t without the MLP sum (test-only)"),
        }
    }

    /// Forward all-reduces (and as many backward): blocks.md's count.
    pub fn syncs(self) -> Syncs {
        match self {
            BlockKind::T | BlockKind::L => Syncs::PerBlock(2),
            BlockKind::S => Syncs::PerBlock(1),
            BlockKind::P => Syncs::PerRun(1),
            #[cfg(test)]
            BlockKind::X => Syncs::PerBlock(1),
        }
    }

    /// Of those, the ones a rank waits for with nothing to compute meanwhile: a ladder
    /// waits only at the end of its run (its last MLP sum); the others wait for each.
    pub fn exposed_syncs(self) -> Syncs {
        match self {
            BlockKind::L => Syncs::PerRun(1),
            BlockKind::T | BlockKind::S | BlockKind::P => self.syncs(),
            #[cfg(test)]
            BlockKind::X => self.syncs(),
        }
    }

    /// Whether the kind computes another function of the same weights at another tp (its
    /// ranks' paths are not summed exactly): s and p; t and l are the same at every tp.
    pub fn depends_on_tp(self) -> bool {
        match self {
            BlockKind::S | BlockKind::P => true,
            BlockKind::T | BlockKind::L => false,
            #[cfg(test)]
            BlockKind::X => true,
        }
    }

    /// How its replicated parameters live across the TP group (which gradients are
    /// partial), and which output biases it has.
    pub fn tags(self) -> BlockTags {
        match self {
            BlockKind::T => t::TAGS,
            BlockKind::S => s::TAGS,
            BlockKind::P => p::TAGS,
            BlockKind::L => l::TAGS,
            #[cfg(test)]
            BlockKind::X => t::TAGS,
        }
    }

    /// Whether a maximal run of the kind is one stage of the stack (its blocks pass
    /// something other than the replicated stream between them: p's private streams,
    /// l's sums in flight), or each block is its own stage.
    pub fn staged_by_run(self) -> bool {
        match self {
            BlockKind::P | BlockKind::L => true,
            BlockKind::T | BlockKind::S => false,
            #[cfg(test)]
            BlockKind::X => false,
        }
    }

    /// The kind a pattern letter names.
    pub fn from_letter(c: char) -> Option<BlockKind> {
        use strum::IntoEnumIterator;
        BlockKind::iter().find(|k| k.letter() == c)
    }

    /// A pattern flag's long help: the syntax, then each kind's letter, name and line.
    pub fn pattern_help() -> String {
        use strum::IntoEnumIterator;
        let kinds: Vec<String> = BlockKind::iter()
            .map(|k| {
                let (name, line) = k.describe();
                format!("  {k}  {name}: {line}")
            })
            .collect();
        format!(
            "Block pattern: one letter per layer, groups \"(..)\" and repeats (sppp, tstt, 3xsppp, 2x(lp)s); docs/blocks.md defines the kinds:\n{}",
            kinds.join("\n")
        )
    }

    /// Every kind's letter, as help and errors list them: "t, s, p and l".
    pub fn letters() -> String {
        use strum::IntoEnumIterator;
        let all: Vec<String> = BlockKind::iter().map(|k| k.letter().to_string()).collect();
        match all.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => all.concat(),
        }
    }
}
