//! The layering of `src/`: no file imports a file that imports it back, directly or
//! through others, and each folder imports only the folders below it that
//! `docs/architecture.md` lists.
//!
//! Reads every library file, expands its `use` trees and inline `crate::`/`super::`/
//! `self::` paths, and resolves each to the file that defines the item: through child
//! modules, and through a module file's `pub use` re-exports to the file they point at
//! (so importing `crate::comm::CountedComm` is an edge to `comm/counted.rs`, not to
//! `comm/mod.rs`). `mod` declarations are not imports; `#[cfg(test)]` modules are left out.
//! Then it looks for a cycle in that graph, and holds the folders to the layers and the
//! import table of `docs/architecture.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;
/// A file's module, its `use` paths (`pub` or not) and its inline paths.
type Parsed = (Module, Vec<(bool, String)>, Vec<String>);

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
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

fn module_of(src: &Path, file: &Path) -> Module {
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
fn code(text: &str) -> String {
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

/// Expands a use tree like `a::{b, c::{d, e}}` into full paths.
fn expand(tree: &str) -> Vec<String> {
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
fn paths(code: &str) -> (Vec<(bool, String)>, Vec<String>) {
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

struct Crate {
    /// module -> its file
    files: BTreeMap<Module, PathBuf>,
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

type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// The library's files and which file imports which.
fn import_graph() -> (PathBuf, Crate, Graph) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
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
            let (u, i) = paths(&code(&std::fs::read_to_string(f).unwrap()));
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

#[test]
fn no_file_in_src_imports_a_file_that_imports_it_back() {
    let (src, krate, edges) = import_graph();
    // Depth-first search for a back edge.
    fn visit(
        m: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for t in edges.get(m).into_iter().flatten() {
            match state.get(t).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == t).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(t.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(t, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if state.get(m).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(m, &edges, &mut state, &mut Vec::new()) {
                let names: Vec<String> = cycle
                    .iter()
                    .map(|m| {
                        krate.files[m]
                            .strip_prefix(&src)
                            .unwrap()
                            .display()
                            .to_string()
                    })
                    .collect();
                panic!("import cycle: {}", names.join(" -> "));
            }
        }
    }
}

/// The lines of `docs/architecture.md` between `<!-- NAME` and `<!-- end NAME -->`.
fn architecture_section(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = doc
        .find(&format!("<!-- {name}"))
        .unwrap_or_else(|| panic!("docs/architecture.md has no `<!-- {name}` section"));
    let end = doc[start..]
        .find(&format!("<!-- end {name} -->"))
        .unwrap_or_else(|| panic!("docs/architecture.md's {name} section has no end"))
        + start;
    doc[start..end]
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// The layers, top first: `src/NAME/` or `src/NAME.rs` at the start of a line.
fn documented_layers() -> Vec<String> {
    architecture_section("layers")
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix("src/"))
        .map(|rest| {
            let name = rest
                .split(|c: char| c == '/' || c.is_whitespace())
                .next()
                .unwrap();
            name.trim_end_matches(".rs").to_string()
        })
        .collect()
}

/// The import table: folder -> the folders it imports.
fn documented_imports() -> BTreeMap<String, BTreeSet<String>> {
    architecture_section("imports")
        .iter()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            match cells.as_slice() {
                ["", folder, imports, ""]
                    if !folder.is_empty() && *folder != "folder" && !folder.starts_with('-') =>
                {
                    Some((
                        folder.to_string(),
                        imports.split_whitespace().map(str::to_string).collect(),
                    ))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn each_folder_imports_only_the_folders_below_it_that_docs_architecture_lists() {
    let (_, krate, edges) = import_graph();
    let layers = documented_layers();
    assert!(
        layers.len() > 10,
        "docs/architecture.md lists {} layers",
        layers.len()
    );
    let position = |top: &str| layers.iter().position(|l| l == top);
    for m in krate.files.keys() {
        if let Some(top) = m.first() {
            assert!(
                position(top).is_some(),
                "src/{top} is not in docs/architecture.md's layer list: add it where it belongs"
            );
        }
    }
    let mut actual: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in &edges {
        let Some(a) = from.first() else { continue };
        for b in targets.iter().filter_map(|t| t.first()).filter(|b| *b != a) {
            actual.entry(a.clone()).or_default().insert(b.clone());
        }
    }
    for (a, bs) in &actual {
        for b in bs {
            assert!(
                position(a) < position(b),
                "src/{a} imports src/{b}, which docs/architecture.md lists above it"
            );
        }
    }
    let table = documented_imports();
    let differing: Vec<String> = layers
        .iter()
        .filter(|l| *l != "bin")
        .filter_map(|layer| {
            let real = actual.get(layer).cloned().unwrap_or_default();
            let written = table.get(layer).cloned().unwrap_or_default();
            (real != written).then(|| {
                let real: Vec<_> = real.into_iter().collect();
                format!("| {layer} | {} |", real.join(" "))
            })
        })
        .collect();
    assert!(
        differing.is_empty(),
        "docs/architecture.md's import table is not what the code imports (a new dependency \
         is a decision to write down); these rows are true:\n{}",
        differing.join("\n")
    );
}
