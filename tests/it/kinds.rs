//! The code against what the documents say of it: blocks.md's counting formula and
//! examples from `BlockKind::syncs`, docs/architecture.md's places a kind is written
//! against the files where the test-only kind `x` is named, and its reading path's files
//! and functions against the tree.

use std::path::{Path, PathBuf};
use tp_harness::blocks::kind::Syncs;
use tp_harness::blocks::{BlockKind, BlockLayout};

fn root() -> PathBuf {
    PathBuf::from(crate::common::REPO)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap()
}

/// The text between `<!-- NAME ...-->` and `<!-- end NAME -->` of a document.
fn section<'a>(md: &'a str, name: &str) -> &'a str {
    md.split(&format!("<!-- {name}"))
        .nth(1)
        .and_then(|s| s.split(&format!("<!-- end {name} -->")).next())
        .unwrap_or_else(|| panic!("no <!-- {name} --> section"))
}

/// blocks.md's term for a kind's forward all-reduces.
fn term(k: BlockKind) -> String {
    match k.syncs() {
        Syncs::PerBlock(1) => format!("count({k})"),
        Syncs::PerBlock(n) => format!("{n} * count({k})"),
        Syncs::PerRun(1) => format!("number of maximal {k}-runs"),
        Syncs::PerRun(n) => format!("{n} * number of maximal {k}-runs"),
    }
}

#[test]
fn blocks_md_counting_formula_and_examples_follow_from_each_kinds_syncs() {
    let md = read("docs/blocks.md");
    let at = md
        .find("Forward all-reduces of activations per forward pass:")
        .unwrap();
    let formula = md[at..].split('`').nth(1).unwrap();
    let mut theirs: Vec<String> = formula.split(" + ").map(|t| t.trim().to_string()).collect();
    let mut ours: Vec<String> = BlockKind::all().map(term).collect();
    theirs.sort();
    ours.sort();
    assert_eq!(theirs, ours, "blocks.md's formula against BlockKind::syncs");
    // Its examples, `pattern` count, each counted from the layout.
    let from = md[at..].find("Examples").unwrap() + at;
    let examples = &md[from..md[from..].find("The backward pass").unwrap() + from];
    let pieces: Vec<&str> = examples.split('`').collect();
    let mut checked = 0;
    // Inside backticks (odd pieces) a pattern, then " <count>, ".
    for pair in pieces[1..].chunks(2) {
        let [pattern, rest] = pair else { continue };
        let n: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let layout = BlockLayout::parse(pattern).unwrap();
        assert_eq!(
            layout.forward_allreduces(),
            n.parse::<usize>().unwrap(),
            "{pattern}"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} examples found");
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn a_kind_is_its_file_and_its_registry_line_as_the_test_only_kind_shows() {
    let md = read("docs/architecture.md");
    let list = section(&md, "kind places");
    // The places a kind is written, with `<name>` its file's name.
    let mut listed: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with("src/") || w.starts_with("lab/src/"))
        .map(|w| w.replace("<name>", "private_channel"))
        .collect();
    // Where the test-only kind `x` (blocks/kinds/private_channel.rs) is named, in both
    // crates: every other file reads a kind's facts from its spec.
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    rust_files(&root().join("lab/src"), &mut files);
    let mut named: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("private_channel") || text.contains("PrivateChannel")
        })
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    listed.sort();
    named.sort();
    assert_eq!(
        listed, named,
        "docs/architecture.md's kind places against where kind x is named"
    );
}

/// The bodies of every function named `name` in `text` (an impl's method and a free
/// function alike), from `fn name` to its closing brace.
fn bodies<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    for pat in [format!("fn {name}("), format!("fn {name}<")] {
        for (at, _) in text.match_indices(&pat) {
            let Some(open) = text[at..].find('{').map(|i| at + i) else {
                continue;
            };
            let mut depth = 0;
            for (i, c) in text[open..].char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    out.push(&text[at..open + i + 1]);
                    break;
                }
            }
        }
    }
    out
}

/// Whether `body` calls a function called `name` (`name(`, `.name(`, `::name(`).
fn calls(body: &str, name: &str) -> bool {
    body.match_indices(&format!("{name}(")).any(|(i, _)| {
        let before = body[..i].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !body[..i].ends_with("fn ")
    })
}

#[test]
fn architecture_md_reading_path_follows_the_calls() {
    let md = read("docs/architecture.md");
    let path = section(&md, "reading path");
    // Every `src/...rs` or `lab/src/...rs` followed by its functions in parentheses:
    // `(`a`, `b`)`, in the order the path names them.
    let mut steps: Vec<(String, Vec<String>, String)> = Vec::new();
    for (i, piece) in path.split('`').enumerate() {
        let in_a_crate = piece.starts_with("src/") || piece.starts_with("lab/src/");
        if i % 2 == 0 || !in_a_crate || !piece.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(root().join(piece))
            .unwrap_or_else(|_| panic!("the reading path names {piece}, which does not exist"));
        let rest = path.split(&format!("`{piece}`")).nth(1).unwrap();
        let Some(fns) = rest.strip_prefix(" (") else {
            continue;
        };
        let fns: Vec<String> = fns[..fns.find(')').unwrap()]
            .split(", ")
            .map(|f| f.trim_matches('`').to_string())
            .collect();
        for f in &fns {
            assert!(
                !bodies(&text, f).is_empty(),
                "the reading path names {f} in {piece}, which has no such function"
            );
        }
        steps.push((piece.to_string(), fns, text));
    }
    assert!(steps.len() >= 18, "only {} files on the path", steps.len());
    // Each file after the first is entered from a function named before it.
    for (j, (file, fns, _)) in steps.iter().enumerate().skip(1) {
        let entered = steps[..j].iter().any(|(_, before, text)| {
            (before.iter())
                .flat_map(|b| bodies(text, b))
                .any(|body| fns.iter().any(|f| calls(body, f)))
        });
        assert!(
            entered,
            "the reading path reaches {file} ({}), but no function it names before calls one",
            fns.join(", ")
        );
    }
}
