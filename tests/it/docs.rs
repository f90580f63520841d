//! The documentation holds: the README stays a front door, every relative link lands on
//! a file of the repository, nothing points outside it, and `docs/blocks.md` is the
//! design's definition of the blocks.

use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(crate::common::REPO)
}

/// README.md, every page of docs/ and the folders' READMEs.
fn pages() -> Vec<PathBuf> {
    let r = root();
    let mut out = vec![r.join("README.md")];
    for dir in ["docs", "scripts", "plots", "datasets", "vendor", "configs"] {
        let Ok(entries) = std::fs::read_dir(r.join(dir)) else {
            continue;
        };
        out.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md")),
        );
    }
    out.sort();
    out
}

/// The targets of a page's markdown links `[text](target)`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// `path` with `.` and `..` folded, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_lands_on_a_file_inside_the_repository() {
    let r = normalise(&root());
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            if file.is_empty() {
                continue;
            }
            let at = normalise(&page.parent().unwrap().join(file));
            let name = page.strip_prefix(&r).unwrap_or(&page).display().to_string();
            assert!(
                at.starts_with(&r),
                "{name} links to {target}, outside the repository: bring the page in (docs/)"
            );
            assert!(
                at.exists(),
                "{name} links to {target}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: the parser is broken"
    );
}

#[test]
fn no_doc_comment_in_src_points_outside_the_repository() {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                for (i, line) in std::fs::read_to_string(&p).unwrap().lines().enumerate() {
                    let t = line.trim_start();
                    // Documents are cited from docs/; data folders outside (the shared
                    // datasets, the golden cases) are where the code looks, not links.
                    let doc = t.starts_with("//!") || t.starts_with("///");
                    if doc && (t.contains("shared/design") || t.contains("](../")) {
                        out.push(format!("{}:{}", p.display(), i + 1));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(&root().join("src"), &mut found);
    assert!(
        found.is_empty(),
        "doc comments pointing outside the repository (use docs/ instead): {found:?}"
    );
}

#[test]
fn the_readme_is_a_front_door_of_at_most_200_lines_that_indexes_every_docs_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: move detail into docs/"
    );
    let first_screen: String = readme.lines().take(60).collect::<Vec<_>>().join("\n");
    for must in [
        "scripts/run-default.sh",
        "scripts/test.sh",
        "docs/blocks.md",
    ] {
        assert!(
            first_screen.contains(must),
            "README's first screen lacks {must}"
        );
    }
    for page in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        let name = format!("docs/{}", page.file_name().to_string_lossy());
        assert!(readme.contains(&name), "README's index lacks {name}");
    }
    // The results section is the answer in short with a link (35 lines at most, issue
    // 63); the tables live in docs/.
    let results = readme
        .split("\n## ")
        .find(|s| s.starts_with("Results"))
        .expect("README has a Results section");
    let n = results.lines().count();
    assert!(
        n <= 35,
        "README's Results section has {n} lines: keep it the answer in short, detail in docs/results.md"
    );
    assert!(results.contains("docs/results.md"));
}

#[test]
fn docs_blocks_md_defines_every_block_kind_and_equals_the_design_copy_where_present() {
    let ours = std::fs::read_to_string(root().join("docs/blocks.md")).unwrap();
    for kind in ["t", "s", "p", "l"] {
        assert!(
            ours.contains(&format!("## `{kind}` ")),
            "docs/blocks.md has no section for `{kind}`"
        );
    }
    // The design folder sits next to the repository in the project's workspace; a
    // clone elsewhere has only the copy, which is then the reference.
    let design = root().join("../shared/design/blocks.md");
    match std::fs::read_to_string(&design) {
        Ok(theirs) => assert!(
            ours == theirs,
            "docs/blocks.md differs from {}: copy it over (cp {} docs/blocks.md) and check the code against the change",
            design.display(),
            design.display()
        ),
        Err(_) => eprintln!("{} is not here: docs/blocks.md not compared", design.display()),
    }
}

/// docs/links.md's table is the link catalogue, generated: no second list to drift.
#[test]
fn docs_links_md_holds_the_link_catalogue_as_the_code_generates_it() {
    let text = std::fs::read_to_string(root().join("docs/links.md")).unwrap();
    let start = "<!-- link catalogue: generated from src/comm/link_catalog.rs -->\n";
    let end = "<!-- end of the link catalogue -->";
    let table = text
        .split_once(start)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(t, _)| t)
        .expect("docs/links.md has the catalogue's markers");
    let want = tp_harness::comm::link_catalog::markdown();
    assert!(
        table.trim() == want.trim(),
        "docs/links.md's link table is stale; put this between its markers:\n{want}"
    );
}
