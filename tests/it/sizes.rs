//! Small parts with one job each: no function over 100 lines, no file over 500, in the
//! library and the tests alike.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The functions of a rustfmt-formatted file longer than `limit` lines, as
/// `name (lines)`: a function ends at the first `}` with its `fn` line's indentation.
fn long_functions(text: &str, limit: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let is_fn = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "unsafe fn ",
            "pub unsafe fn ",
        ]
        .iter()
        .any(|p| body.starts_with(p));
        if !is_fn || body.ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(len) = lines[i + 1..].iter().position(|l| *l == close) {
            if len + 2 > limit {
                let name = body.split('(').next().unwrap_or(body);
                out.push(format!("{name} ({} lines)", len + 2));
            }
        }
    }
    out
}

#[test]
fn no_function_is_over_100_lines_and_no_file_over_500_in_either_crate_and_tests() {
    let root = Path::new(crate::common::REPO);
    let mut all = Vec::new();
    rust_files(&root.join("src"), &mut all);
    rust_files(&root.join("lab/src"), &mut all);
    rust_files(&root.join("tests"), &mut all);
    assert!(all.len() > 50, "only {} files found", all.len());
    let mut over = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(root).unwrap().display().to_string();
        let n = text.lines().count();
        if n > 500 {
            over.push(format!("{name}: {n} lines"));
        }
        over.extend(
            long_functions(&text, 100)
                .into_iter()
                .map(|l| format!("{name}: {l}")),
        );
    }
    assert!(
        over.is_empty(),
        "split these into parts with one job each: {over:#?}"
    );
    let sample = "fn a() {\n    x;\n}\n    pub fn b() {\n        y;\n        z;\n    }\n";
    assert_eq!(
        long_functions(sample, 2),
        ["fn a (3 lines)", "pub fn b (4 lines)"]
    );
}
