//! Names the source the binaries are built from, for their runs' records
//! (`summary.json`'s `build`): the commit, with "+modified" where the sources compiled
//! differ from it. Not set outside a git checkout (a source tarball), where the records
//! say nothing rather than something unchecked.

use std::process::Command;

/// What the binaries compile: a change to anything else (docs, plots, records) leaves
/// the build what its commit says.
const SOURCES: [&str; 7] = [
    "../src",
    "../kernels",
    "../vendor",
    "../build.rs",
    "../Cargo.toml",
    "../Cargo.lock",
    "src",
];

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    // Rerun when a source changes, and when the commit does (HEAD, the index, the refs:
    // where git keeps them, also in a worktree).
    println!("cargo:rerun-if-changed=Cargo.toml");
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    for p in ["HEAD", "index", "refs", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    let mut diff = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    diff.extend(SOURCES);
    diff.push("Cargo.toml");
    let modified = git(&diff).is_none_or(|changes| !changes.is_empty());
    let suffix = if modified { "+modified" } else { "" };
    println!("cargo:rustc-env=TP_BUILD={commit}{suffix}");
}
