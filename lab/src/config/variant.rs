//! What a run is in a study, typed: its layout as block kinds layer by layer and what its
//! TP activation sums travel in. Two spellings of one layout (`4xt`, `tttt`) are one
//! variant; tables show the spelling of the first run they met.

use anyhow::{Context, Result};
use std::cmp::Ordering;
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::CommDtype;

#[derive(Debug, Clone)]
pub struct Variant {
    /// The layout layer by layer, however it was spelled (`tttt` for `4xt`).
    kinds: String,
    comm_dtype: CommDtype,
    /// The pattern as it was typed: what tables and legends show.
    spelling: String,
}

impl Variant {
    /// A layout, already parsed, with what its sums travel in (a run's is
    /// `RunConfig::variant`).
    pub fn of_layout(layout: &BlockLayout, comm_dtype: CommDtype) -> Self {
        Self {
            kinds: layout.expanded(),
            comm_dtype,
            spelling: layout.as_str().to_string(),
        }
    }

    fn new(pattern: &str, comm_dtype: CommDtype) -> Result<Self> {
        Ok(Self {
            kinds: BlockLayout::parse(pattern)?.expanded(),
            comm_dtype,
            spelling: pattern.to_string(),
        })
    }

    /// A variant as a user names it: a pattern, `+int8` (`+fp8`, `+bf16`) when its sums
    /// are compressed.
    pub fn parse(name: &str) -> Result<Self> {
        let (pattern, dtype) = name.split_once('+').unwrap_or((name, "f32"));
        let known = CommDtype::all().find(|d| d.label() == dtype);
        let dtype = known.with_context(|| {
            format!("`{name}`: no comm_dtype `{dtype}` (f32, bf16, fp8 or int8)")
        })?;
        Self::new(pattern, dtype).with_context(|| format!("`{name}` is not a pattern"))
    }

    /// Megatron's layout: every layer `t`, its sums exact.
    pub fn all_t(&self) -> bool {
        self.comm_dtype == CommDtype::F32 && self.kinds.chars().all(|c| c == 't')
    }

    /// Whether `other` is this layout at another depth: the same kinds in the same order,
    /// runs of a kind of any length (`sppp` is `s11xp` at twelve layers, `tttt` is `12xt`),
    /// with the same compression.
    pub fn stretches_to(&self, other: &Variant) -> bool {
        let runs = |v: &Variant| {
            let mut k: Vec<char> = v.kinds.chars().collect();
            k.dedup();
            k
        };
        self.comm_dtype == other.comm_dtype && runs(self) == runs(other)
    }

    /// Whether `other` has this layout, layer by layer, whatever its sums travel in (a
    /// sweep's baseline pattern pairs with the groups of each compression).
    pub fn same_layout(&self, other: &Variant) -> bool {
        self.kinds == other.kinds
    }

    fn key(&self) -> (&str, &str) {
        (&self.kinds, self.comm_dtype.label())
    }
}

impl PartialEq for Variant {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Variant {}

impl PartialOrd for Variant {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Variant {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.comm_dtype {
            CommDtype::F32 => write!(f, "{}", self.spelling),
            q => write!(f, "{}+{}", self.spelling, q.label()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Variant;

    fn v(name: &str) -> Variant {
        Variant::parse(name).unwrap()
    }

    #[test]
    fn spellings_of_one_layout_are_one_variant_shown_as_typed() {
        assert_eq!(v("4xt"), v("tttt"));
        assert_eq!(v("12xs"), v("ssssssssssss"));
        assert_eq!(v("4xt").to_string(), "4xt");
        assert_ne!(v("tttt"), v("tttt+int8"));
        assert_eq!(v("3x(sp)+int8").to_string(), "3x(sp)+int8");
        assert!(v("4xt").all_t() && !v("tttt+int8").all_t() && !v("tstt").all_t());
        assert!(Variant::parse("tqtt").is_err() && Variant::parse("tttt+int4").is_err());
    }

    #[test]
    fn a_layout_stretches_to_its_runs_at_another_depth() {
        assert!(v("sppp").stretches_to(&v("s11xp")));
        assert!(v("tttt").stretches_to(&v("12xt")));
        assert!(v("llll+int8").stretches_to(&v("12xl+int8")));
        assert!(!v("sppp").stretches_to(&v("3xsppp")));
        assert!(!v("sppp").stretches_to(&v("sppppp+int8")));
        assert!(!v("llll").stretches_to(&v("tttttt")));
    }
}
