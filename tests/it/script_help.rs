//! Every script answers `--help` at once: its header, exit 0, nothing built or run (a
//! user's first question of a script must not start a 10-minute build or a study).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn scripts() -> Vec<PathBuf> {
    let root = Path::new(crate::common::REPO).join("scripts");
    let mut out = Vec::new();
    for dir in [
        root.clone(),
        root.join("bench"),
        root.join("cluster"),
        root.join("cuda"),
    ] {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "sh") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_script_answers_help_at_once_with_its_header() {
    let all = scripts();
    assert!(all.len() >= 15, "{all:?}");
    for script in all {
        for flag in ["--help", "-h"] {
            let start = Instant::now();
            // An empty PATH but for bash's own: a script that tried to build or run
            // anything (cargo, tp-*, mpirun, apt-get) would fail instead of printing.
            let o = Command::new("bash")
                .arg(&script)
                .arg(flag)
                .env("PATH", "/usr/bin:/bin")
                .env("CARGO_TARGET_DIR", "/nonexistent/target")
                .output()
                .unwrap();
            let took = start.elapsed();
            let text = String::from_utf8_lossy(&o.stdout);
            let name = script.display();
            assert!(o.status.success(), "{name} {flag}: {o:?}");
            assert!(text.lines().count() >= 2, "{name} {flag}: {text}");
            assert!(!text.contains("Compiling"), "{name} {flag}: {text}");
            assert!(took < Duration::from_secs(10), "{name} {flag}: {took:?}");
        }
    }
}
