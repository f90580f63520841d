//! The format of a run directory's JSON records (`summary.json`, `comm.json`,
//! `eval.json`, `scan.json`, `bench.json`): each carries `format_version`, stamped by the
//! one writer here and checked by the one reader. A record of a newer format than this
//! build knows is refused in one line naming both; an older one reads through its type
//! (a record without the field is format 1, from before it was kept).

use crate::error::user;
use anyhow::Result;
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;

/// The format this build writes, and the newest it reads.
pub const RECORD_FORMAT: u32 = 2;

/// A record with its format in front.
#[derive(Serialize)]
struct Stamped<'a, T> {
    format_version: u32,
    #[serde(flatten)]
    record: &'a T,
}

/// `record` as the JSON text its file holds.
pub fn to_json<T: Serialize>(record: &T) -> Result<String> {
    let stamped = Stamped {
        format_version: RECORD_FORMAT,
        record,
    };
    Ok(serde_json::to_string_pretty(&stamped)?)
}

/// The record `text` (read from `path`) holds, of any format up to [`RECORD_FORMAT`].
pub fn from_json<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T> {
    let unreadable = |e: serde_json::Error| user(format!("{} cannot be read: {e}", path.display()));
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(unreadable)?;
    let version = match value.as_object_mut() {
        Some(fields) => fields.remove("format_version"),
        None => None,
    };
    let version = version.and_then(|v| v.as_u64()).unwrap_or(1);
    if version > u64::from(RECORD_FORMAT) {
        return Err(user(format!(
            "{} is of record format {version}, newer than this build reads (up to {RECORD_FORMAT}): read it with the tp-harness that wrote it, or a newer one",
            path.display()
        )));
    }
    serde_json::from_value(value).map_err(unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Record {
        loss: f64,
        #[serde(default)]
        note: Option<String>,
    }

    #[test]
    fn a_record_carries_its_format_and_reads_back_through_its_type() {
        let r = Record {
            loss: 1.25,
            note: None,
        };
        let text = to_json(&r).unwrap();
        assert!(text.starts_with("{\n  \"format_version\": 2,"), "{text}");
        assert_eq!(from_json::<Record>(&text, Path::new("r.json")).unwrap(), r);
    }

    #[test]
    fn an_older_record_reads_and_a_newer_one_is_one_line_naming_both_formats() {
        let old: Record = from_json(r#"{"loss": 2.0}"#, Path::new("old.json")).unwrap();
        assert_eq!(old.loss, 2.0);
        let newer = r#"{"format_version": 9, "loss": 2.0}"#;
        let e = from_json::<Record>(newer, Path::new("run/summary.json")).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("run/summary.json") && msg.contains("format 9") && msg.contains("up to 2"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
    }
}
