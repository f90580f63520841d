//! The format of a run directory's JSON records (`summary.json`, `comm.json`,
//! `eval.json`, `scan.json`, `bench.json`, `trace.json`, and each line of `log.jsonl`, which a resume by
//! a newer build may append to): each carries `format_version`, stamped by the one writer
//! here and checked by the one reader. A record of a newer format than this
//! build knows is refused in one line naming both; an older one is brought up to this
//! format here, the one place old formats are read (a record without the field is
//! format 1, from before it was kept).

use anyhow::Result;
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;
use tp_harness::error::user;

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

/// `record` as compact JSON: one line of a JSON-lines file (no newline), or a large file.
pub fn to_json_line<T: Serialize>(record: &T) -> Result<String> {
    let stamped = Stamped {
        format_version: RECORD_FORMAT,
        record,
    };
    Ok(serde_json::to_string(&stamped)?)
}

/// The record `text` (read from `path`) holds, of any format up to [`RECORD_FORMAT`].
pub fn from_json<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T> {
    let what = path.display().to_string();
    let value =
        serde_json::from_str(text).map_err(|e| user(format!("{what} cannot be read: {e}")))?;
    from_value(value, &what)
}

/// The record a parsed JSON `value` (`what`: its file, or its file and line) holds, of
/// any format up to [`RECORD_FORMAT`].
pub fn from_value<T: DeserializeOwned>(mut value: serde_json::Value, what: &str) -> Result<T> {
    let version = match value.as_object_mut() {
        Some(fields) => fields.remove("format_version"),
        None => None,
    };
    // Absent: format 1, from before it was kept. Present: a whole number from 1 — text,
    // a fraction, a negative, null or a number past u64 is damage, not a format.
    let version = match version {
        None => 1,
        Some(v) => match v.as_u64().filter(|n| *n >= 1) {
            Some(n) => n,
            None => {
                return Err(user(format!(
                    "{what} has format_version {v}, which is not a format number (a whole number from 1): the file is damaged or not a tp-harness record"
                )))
            }
        },
    };
    if version > u64::from(RECORD_FORMAT) {
        return Err(user(newer_message(what, version)));
    }
    if version < 2 {
        upgrade_from_1(&mut value);
    }
    serde_json::from_value(value).map_err(|e| user(format!("{what} cannot be read: {e}")))
}

/// The format of the record `text`, if it is newer than this build reads.
pub fn newer_format(text: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let version = value.get("format_version")?.as_u64()?;
    (version > u64::from(RECORD_FORMAT)).then_some(version)
}

/// The one line for a record (`what`) of a format newer than this build's.
pub fn newer_message(what: &str, version: u64) -> String {
    format!("{what} is of record format {version}, newer than this build reads (up to {RECORD_FORMAT}): read it with the tp-harness that wrote it, or a newer one")
}

/// Format 1's comm.json may give its emulated link in GB/s (`gbytes_per_s`); format 2
/// says Gbit/s (`gbit_per_s`), as the config's `link_gbps` does.
fn upgrade_from_1(value: &mut serde_json::Value) {
    let link = value
        .get_mut("emulated_link")
        .and_then(|l| l.as_object_mut());
    if let Some(link) = link {
        if let Some(gbytes) = link.remove("gbytes_per_s").and_then(|g| g.as_f64()) {
            link.entry("gbit_per_s").or_insert((gbytes * 8.0).into());
        }
    }
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
    fn a_format_1_link_in_gbytes_per_second_reads_as_gbit() {
        #[derive(Debug, serde::Deserialize)]
        struct Comm {
            emulated_link: Option<tp_harness::comm::LinkModel>,
        }
        let old = r#"{"emulated_link": {"gbytes_per_s": 1.25, "latency_us": 25.0}}"#;
        let comm: Comm = from_json(old, Path::new("comm.json")).unwrap();
        let want = tp_harness::comm::LinkModel::from_config(10.0, 25.0);
        assert_eq!(comm.emulated_link, want);
        let v2 =
            r#"{"format_version": 2, "emulated_link": {"gbytes_per_s": 1.25, "latency_us": 25.0}}"#;
        assert!(from_json::<Comm>(v2, Path::new("comm.json")).is_err());
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

    /// The hostile probe's format numbers: none is format 1, none is "newer"; each is one
    /// line calling it damage.
    #[test]
    fn a_format_that_is_not_a_whole_number_from_one_is_refused_as_damage() {
        for bad in [
            "\"99\"",
            "99.5",
            "1e3",
            "18446744073709551617",
            "-1",
            "null",
            "0",
        ] {
            let text = format!("{{\"format_version\": {bad}, \"loss\": 1.0}}");
            let e = from_json::<Record>(&text, Path::new("s.json"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("is not a format number"), "{bad}: {e}");
            assert!(!e.contains('\n'));
        }
    }
}
