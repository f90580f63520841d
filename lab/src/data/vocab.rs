//! Character-level vocabulary: the sorted set of characters of a text.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharVocab {
    pub chars: Vec<char>,
}

impl CharVocab {
    pub fn from_text(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Self { chars }
    }

    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u16>> {
        text.chars()
            .map(|c| match self.chars.binary_search(&c) {
                Ok(i) => Ok(i as u16),
                Err(_) => bail!("character {c:?} is not in the dataset's vocabulary"),
            })
            .collect()
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i as usize).copied().unwrap_or('\u{fffd}'))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode_round_trips_and_ids_follow_sorted_chars() {
        let v = CharVocab::from_text("hello world\n");
        assert_eq!(v.chars, vec!['\n', ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w']);
        let ids: Vec<u32> = v
            .encode("hold")
            .unwrap()
            .into_iter()
            .map(u32::from)
            .collect();
        assert_eq!(v.decode(&ids), "hold");
        assert!(v.encode("z").is_err());
    }
}
