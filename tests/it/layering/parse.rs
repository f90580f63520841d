//! Reading a crate's sources (`src/`, `lab/src/`) into an import graph: every library file's `use` trees and inline
//! `crate::`/`super::`/`self::` paths, resolved to the files that define the items
//! (through child modules and `pub use` re-exports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(super) type Module = Vec<String>;
/// A file's module, its `use` paths (`pub` or not) and its inline paths.
pub(super) type Parsed = (Module, Vec<(bool, String)>, Vec<String>);

pub(super) fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().unwrap() != "bin" {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

pub(super) fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod") | Some("lib")) {
        m.pop();
    }
    m
}

/// The code without comments, string literals and test modules.
pub(super) fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    if let Some(i) = out.find("#[cfg(test)]\nmod tests") {
        out.truncate(i);
    }
    // Drop string literals (messages mention paths like `crate::x` rarely, but safely).
    let mut clean = String::with_capacity(out.len());
    let mut in_str = false;
    let mut prev = ' ';
    for c in out.chars() {
        if c == '"' && prev != '\\' && prev != '\'' {
            in_str = !in_str;
            clean.push(' ');
        } else if !in_str {
            clean.push(c);
        }
        prev = c;
    }
    clean
}

/// The code with paths inside inline modules (`mod x { ... }`) rewritten as the file
/// itself would spell them: inside one level, `super::a` is the file's `self::a` and
/// `super::super::a` its `super::a`. (An inline module's items are the file's: its
/// imports are the file's imports.)
pub(super) fn inline_modules_flattened(code: &str) -> String {
    let bytes = code.as_bytes();
    let (mut out, mut depth, mut i) = (String::with_capacity(code.len()), 0usize, 0);
    let mut opened: Vec<usize> = Vec::new(); // brace depth inside each open inline module
    let word_start = |i: usize| {
        i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':')
    };
    while i < code.len() {
        let rest = &code[i..];
        if word_start(i) && rest.starts_with("mod ") {
            let after = rest[4..].trim_start();
            let name_len = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(0);
            if name_len > 0 && after[name_len..].trim_start().starts_with('{') {
                opened.push(depth + 1);
            }
        }
        if word_start(i) && !opened.is_empty() && rest.starts_with("super::") {
            let mut supers = 0;
            while code[i + 7 * supers..].starts_with("super::") {
                supers += 1;
            }
            let kept = supers.saturating_sub(opened.len());
            out.push_str(&if kept == 0 {
                "self::".to_string()
            } else {
                "super::".repeat(kept)
            });
            i += 7 * supers;
            continue;
        }
        let c = rest.chars().next().unwrap();
        match c {
            '{' => depth += 1,
            '}' => {
                if opened.last() == Some(&depth) {
                    opened.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Expands a use tree like `a::{b, c::{d, e}}` into full paths.
pub(super) fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let base = tree.split(" as ").next().unwrap().trim();
        return if base.is_empty() {
            vec![]
        } else {
            vec![base.to_string()]
        };
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .flat_map(expand)
        .map(|p| {
            if p == "self" {
                prefix.to_string()
            } else {
                format!("{prefix}::{p}")
            }
        })
        .collect()
}

/// `(is_pub, path)` of every `use` in the code, and the inline paths outside them.
pub(super) fn paths(code: &str) -> (Vec<(bool, String)>, Vec<String>) {
    let mut uses = Vec::new();
    let mut rest = String::new();
    let mut s = code;
    while let Some(i) = s.find("use ") {
        let before = &s[..i];
        let at_stmt = before
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == '}');
        if !at_stmt {
            rest.push_str(&s[..i + 4]);
            s = &s[i + 4..];
            continue;
        }
        let is_pub = before.trim_end().ends_with("pub") || before.trim_end().ends_with(')');
        let end = s[i..].find(';').map_or(s.len(), |e| i + e);
        for p in expand(&s[i + 4..end]) {
            uses.push((is_pub, p.split_whitespace().collect::<String>()));
        }
        rest.push_str(before);
        s = &s[end..];
    }
    rest.push_str(s);
    let mut inline = Vec::new();
    let bytes = rest.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = rest[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let end = rest[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(rest.len(), |e| at + e);
            inline.push(rest[at..end].trim_end_matches(':').to_string());
        }
    }
    (uses, inline)
}

pub(super) struct Crate {
    /// module -> its file
    pub(super) files: BTreeMap<Module, PathBuf>,
    /// module -> (public `use` paths, resolved against that module)
    reexports: BTreeMap<Module, Vec<Vec<String>>>,
}

impl Crate {
    /// Absolute segments of `path` used inside module `at` (None: an external crate).
    fn absolute(&self, at: &Module, path: &str) -> Option<Vec<String>> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = match segs.first()? {
            &"crate" => vec![],
            &"super" | &"self" => at.clone(),
            first
                if self
                    .files
                    .contains_key(&[at.clone(), vec![first.to_string()]].concat()) =>
            {
                at.clone()
            }
            _ => return None,
        };
        let mut rest = &segs[..];
        if matches!(segs[0], "crate") {
            rest = &segs[1..];
        }
        while let Some(s) = rest.first() {
            match *s {
                "super" => {
                    base.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
        Some(
            base.into_iter()
                .chain(rest.iter().map(|s| s.to_string()))
                .collect(),
        )
    }

    /// The file that defines the item at absolute `path`, following re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Module> {
        let mut m: Module = vec![];
        let mut i = 0;
        while i < path.len() {
            let mut next = m.clone();
            next.push(path[i].clone());
            if self.files.contains_key(&next) {
                m = next;
                i += 1;
            } else {
                break;
            }
        }
        if i == path.len() || depth > 8 {
            return Some(m);
        }
        let item = &path[i];
        for re in self.reexports.get(&m).into_iter().flatten() {
            if re.last() == Some(item) {
                let tail: Vec<String> = re
                    .iter()
                    .cloned()
                    .chain(path[i + 1..].iter().cloned())
                    .collect();
                return self.resolve(&tail, depth + 1);
            }
        }
        Some(m)
    }
}

pub(super) type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// A crate's library files (under `src`, relative to the repository) and which file
/// imports which. Paths into the other crate (`tp_harness::`) are not followed: the
/// compiler keeps the engine from reaching the lab, and the lab may use any of it.
pub(super) fn import_graph(src: &str) -> (PathBuf, Crate, Graph) {
    let src = Path::new(crate::common::REPO).join(src);
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut krate = Crate {
        files: all
            .iter()
            .map(|f| (module_of(&src, f), f.clone()))
            .collect(),
        reexports: BTreeMap::new(),
    };
    let parsed: Vec<Parsed> = all
        .iter()
        .map(|f| {
            let text = code(&std::fs::read_to_string(f).unwrap());
            let (u, i) = paths(&inline_modules_flattened(&text));
            (module_of(&src, f), u, i)
        })
        .collect();
    for (m, uses, _) in &parsed {
        let re: Vec<Vec<String>> = uses
            .iter()
            .filter(|(p, _)| *p)
            .filter_map(|(_, path)| krate.absolute(m, path))
            .collect();
        krate.reexports.insert(m.clone(), re);
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, uses, inline) in &parsed {
        let targets = uses
            .iter()
            .map(|(_, p)| p.as_str())
            .chain(inline.iter().map(String::as_str))
            .filter_map(|p| krate.absolute(m, p))
            .filter_map(|abs| krate.resolve(&abs, 0))
            .filter(|t| t != m && !t.is_empty());
        edges.entry(m.clone()).or_default().extend(targets);
    }
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 50,
        "the import graph is implausibly small: the parser is broken"
    );
    (src, krate, edges)
}
