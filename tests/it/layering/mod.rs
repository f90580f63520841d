//! The layering inside each crate (the engine's `src/`, the lab's `lab/src/`; the seam
//! between them is the compiler's): no file imports a file that imports it back,
//! directly or through others, and each folder imports only the folders below it that
//! `docs/architecture.md` lists for its crate.
//!
//! Reads every library file, expands its `use` trees and inline `crate::`/`super::`/
//! `self::` paths, and resolves each to the file that defines the item: through child
//! modules, and through a module file's `pub use` re-exports to the file they point at
//! (so importing `crate::comm::CountedComm` is an edge to `comm/counted.rs`, not to
//! `comm/mod.rs`). `mod` declarations are not imports; `#[cfg(test)]` modules are left out.
//! Then it looks for a cycle in that graph, and holds the folders to the layers and the
//! import table of `docs/architecture.md`.

mod parse;

use parse::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crates: the name of their sections in docs/architecture.md, their sources.
const CRATES: [(&str, &str); 2] = [("engine", "src"), ("lab", "lab/src")];

#[test]
fn no_file_in_either_crate_imports_a_file_that_imports_it_back() {
    for (_, src) in CRATES {
        no_cycle_in(src);
    }
}

fn no_cycle_in(src: &str) {
    let (src, krate, edges) = import_graph(src);
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
    let path = Path::new(crate::common::REPO).join("docs/architecture.md");
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

/// A crate's layers, top first: `SRC/NAME/` or `SRC/NAME.rs` at the start of a line.
fn documented_layers(krate: &str, src: &str) -> Vec<String> {
    let prefix = format!("{src}/");
    architecture_section(&format!("{krate} layers"))
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix(prefix.as_str()))
        .map(|rest| {
            let name = rest
                .split(|c: char| c == '/' || c.is_whitespace())
                .next()
                .unwrap();
            name.trim_end_matches(".rs").to_string()
        })
        .collect()
}

/// A crate's import table: folder -> the folders of the crate it imports.
fn documented_imports(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    architecture_section(&format!("{krate} imports"))
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
    for (name, src) in CRATES {
        layered_as_documented(name, src);
    }
}

fn layered_as_documented(name: &str, src: &str) {
    let (_, krate, edges) = import_graph(src);
    let layers = documented_layers(name, src);
    assert!(
        layers.len() > 7,
        "docs/architecture.md lists {} layers for the {name}",
        layers.len()
    );
    let position = |top: &str| layers.iter().position(|l| l == top);
    for m in krate.files.keys() {
        if let Some(top) = m.first() {
            assert!(
                position(top).is_some(),
                "{src}/{top} is not in docs/architecture.md's {name} layers: add it where it belongs"
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
                "{src}/{a} imports {src}/{b}, which docs/architecture.md lists above it"
            );
        }
    }
    let table = documented_imports(name);
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
        "docs/architecture.md's {name} import table is not what the code imports (a new \
         dependency is a decision to write down); these rows are true:\n{}",
        differing.join("\n")
    );
}

#[test]
fn paths_inside_an_inline_module_are_read_as_the_file_spells_them() {
    let code = "use super::a::B;\nmod inner {\n    use super::{c, d};\n    fn f() { super::super::e::g(); }\n}\nfn h() { super::i(); }\n";
    let flat = inline_modules_flattened(code);
    assert_eq!(
        flat,
        "use super::a::B;\nmod inner {\n    use self::{c, d};\n    fn f() { super::e::g(); }\n}\nfn h() { super::i(); }\n"
    );
}
