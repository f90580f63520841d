//! The sweep file's YAML, as point names and config overrides read it: keys, values as
//! text, names safe for a directory, and text back into a value.

use anyhow::Result;
use serde_yaml_ng::Value;
use std::path::Path;
use tp_harness::error::user;

pub(super) fn key_of(k: &Value, file: &Path) -> Result<String> {
    k.as_str()
        .map(String::from)
        .ok_or_else(|| user(format!("{}: key {k:?} is not a string", file.display())))
}

pub(super) fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

pub(super) fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=.,-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A config value as a sweep file would write it: a number where the text is one.
pub(super) fn value_of(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    match text.parse::<f64>() {
        Ok(x) => Value::from(x),
        Err(_) => Value::String(text.to_string()),
    }
}
