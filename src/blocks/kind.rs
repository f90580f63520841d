//! A block kind as the rest of the code holds it: a handle on its [`KindSpec`] (written in
//! its own file, listed in `blocks/kinds/mod.rs`), compared, hashed and serialised as its
//! pattern letter. Every fact is read from the spec; nothing here names a kind's facts.

use super::kinds::{ladder, parallel, spd, tp_block, REGISTRY};
use super::spec::KindSpec;
pub use super::spec::Syncs;
use super::BlockTags;
use std::fmt;

#[derive(Clone, Copy)]
pub struct BlockKind(&'static KindSpec);

impl BlockKind {
    /// The shipped kinds by name, for the code that treats one of them apart (the SPD
    /// scan's moves, GPT-2's export, the patterns of tests). A new kind needs none.
    pub const T: BlockKind = BlockKind(&tp_block::SPEC);
    pub const S: BlockKind = BlockKind(&spd::SPEC);
    pub const P: BlockKind = BlockKind(&parallel::SPEC);
    pub const L: BlockKind = BlockKind(&ladder::SPEC);

    /// Every registered kind (with the test-only ones in the engine's own tests).
    pub fn all() -> impl Iterator<Item = BlockKind> {
        REGISTRY.iter().map(|s| BlockKind(s))
    }

    /// Every fact of the kind.
    pub fn spec(self) -> &'static KindSpec {
        self.0
    }

    /// Its letter in a pattern.
    pub fn letter(self) -> char {
        self.0.letter
    }

    /// Its name in blocks.md and a line of what it does (help and reports).
    pub fn describe(self) -> (&'static str, &'static str) {
        (self.0.name, self.0.line)
    }

    /// Forward all-reduces (and as many backward): blocks.md's count.
    pub fn syncs(self) -> Syncs {
        self.0.syncs
    }

    /// Of those, the ones a rank waits for with nothing to compute meanwhile.
    pub fn exposed_syncs(self) -> Syncs {
        self.0.exposed_syncs
    }

    /// Whether the kind computes another function of the same weights at another tp.
    pub fn depends_on_tp(self) -> bool {
        self.0.depends_on_tp
    }

    /// How its replicated parameters live across the TP group, and which output biases
    /// it has.
    pub fn tags(self) -> BlockTags {
        self.0.tags
    }

    /// Whether a maximal run of the kind is one stage of the stack.
    pub fn staged_by_run(self) -> bool {
        self.0.staged_by_run
    }

    /// The kind a pattern letter names.
    pub fn from_letter(c: char) -> Option<BlockKind> {
        BlockKind::all().find(|k| k.letter() == c)
    }

    /// A pattern flag's long help: the syntax, then each kind's letter, name and line.
    pub fn pattern_help() -> String {
        let kinds: Vec<String> = BlockKind::all()
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
        let all: Vec<String> = BlockKind::all().map(|k| k.letter().to_string()).collect();
        match all.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => all.concat(),
        }
    }
}

impl PartialEq for BlockKind {
    fn eq(&self, other: &Self) -> bool {
        self.letter() == other.letter()
    }
}

impl Eq for BlockKind {}

impl std::hash::Hash for BlockKind {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.letter().hash(h)
    }
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

impl fmt::Debug for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

/// Serialised (and parsed) as its pattern letter.
impl serde::Serialize for BlockKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.letter().to_string())
    }
}

impl<'de> serde::Deserialize<'de> for BlockKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => BlockKind::from_letter(c),
            _ => None,
        }
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown block kind `{s}` (blocks are {})",
                BlockKind::letters()
            ))
        })
    }
}
