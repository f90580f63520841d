//! `tp-sweep FILE --status`: where a sweep stands, each round's runs counted from their
//! directories, the time left at the median finished run's, the tuning so far; read
//! without running or writing anything.

use crate::common::*;
use crate::sweep::BASE;
use std::path::Path;

/// One layout tuned over two rates on two selection seeds, one value past the edge
/// (extend: 1), one report seed: 4 + 2 + 1 runs.
const TUNED: &str = "grid: {pattern: [tttt]}\ntune: {grid: {learning_rate: [1.0e-3, 1.0e-2]}, seeds: [11, 12], extend: 1}\nseeds: [1]\nbaseline: tttt\n";

fn status(d: &Path) -> String {
    let o = bin(
        "tp-sweep",
        d,
        &["sweep.yaml", "--out", "out", "--status"],
        &[],
    );
    assert_ok(&o);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every file under `dir` with its length and modification time, sorted.
fn listing(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            match m.is_dir() {
                true => todo.push(e.path()),
                false => all.push((
                    e.path().display().to_string(),
                    m.len(),
                    m.modified().unwrap(),
                )),
            }
        }
    }
    all.sort();
    all
}

/// Before a run the status lists the selection grid as to run, counts the report round
/// not listed yet, and creates nothing; after the sweep every round has ended; with a
/// report run gone, one is to run, timed by the median of the finished runs that had the
/// cores to themselves, on the machine they name; with a run past the edge unfinished and
/// another held by a trainer, the rounds after it are not listed (the report round's runs
/// are counted and timed) and the tuning table says which seed is pending. The status
/// writes nothing in any of these.
#[test]
fn the_status_counts_each_rounds_runs_from_their_directories_and_writes_nothing() {
    let d = scratch("sweep-status");
    std::fs::write(d.join("sweep.yaml"), format!("name: tiny\n{BASE}{TUNED}")).unwrap();
    let before = status(&d);
    assert!(
        before.contains("| selection grid | 4 | 0 | 0 | 0 | 4 |"),
        "{before}"
    );
    assert!(before.contains("then: rounds past an edge"), "{before}");
    assert!(
        before.contains("The 4 unfinished runs listed are not timed yet; the report seeds' 1 runs (not listed yet) are not timed yet; rounds past an edge before them add theirs (no run of their settings has finished yet"),
        "the report round counted before it is listed: {before}"
    );
    assert!(
        !d.join("out").exists(),
        "the status made the sweep's folder"
    );

    assert_ok(&bin("tp-sweep", &d, &["sweep.yaml", "--out", "out"], &[]));
    let out = d.join("out");
    let done = status(&d);
    for row in [
        "| selection grid | 4 | 4 | 0 | 0 | 0 |",
        "| past an edge | 2 | 2 | 0 | 0 | 0 |",
        "| report seeds at each choice | 1 | 1 | 0 | 0 | 0 |",
        "- past an edge: tttt's best lies at an edge (learning_rate at the highest value tried): trying learning_rate 0.1 too",
        "- report seeds at each choice: note: tttt's chosen learning_rate 0.1 lies at an edge",
        "Every run listed has ended.",
        "## Tuning so far",
        "best (learning_rate at the highest value tried)",
    ] {
        assert!(done.contains(row), "`{row}` in {done}");
    }
    assert!(!done.contains("then:"), "{done}");

    one_run_left_is_timed_by_the_unshared_runs(&d, &out);

    // A run past the edge not finished (its summary gone: interrupted), its sibling
    // held by a trainer: the refinement-less sweep's next round, the report, is unknown.
    let edge = |seed: u64| out.join(format!("pattern=tttt,learning_rate=0.1,seed={seed}"));
    for seed in [11, 12] {
        std::fs::remove_file(edge(seed).join("summary.json")).unwrap();
    }
    let _trainer = tp_lab::run_dir::DirLock::acquire(&edge(12)).unwrap();
    let files = listing(&out);
    let partial = status(&d);
    assert!(
        partial.contains("| past an edge | 2 | 0 | 0 | 1 | 1 |"),
        "{partial}"
    );
    assert!(
        !partial.contains("report seeds at each choice |"),
        "{partial}"
    );
    assert!(
        partial.contains("then: rounds past an edge while a best lies at one, the report seeds"),
        "{partial}"
    );
    assert!(
        partial.contains("The 2 unfinished runs listed need about 0.2 hours more; the report seeds' 1 runs (not listed yet) need about 0.1 hours more; rounds past an edge before them add theirs"),
        "{partial}"
    );
    assert!(
        partial.contains("| 11 12 |"),
        "both selection seeds pending at 0.1: {partial}"
    );
    assert_eq!(listing(&out), files, "the status wrote under out/");
}

/// The report run removed: half the finished runs took 6 minutes with the cores to
/// themselves, half 1000 hours beside a build; the one to run is timed by the former.
fn one_run_left_is_timed_by_the_unshared_runs(d: &Path, out: &Path) {
    let report = out.join("pattern=tttt,learning_rate=0.1,seed=1");
    std::fs::remove_dir_all(&report).unwrap();
    let mut runs: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("summary.json").is_file())
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 6, "{runs:?}");
    for (i, run) in runs.iter().enumerate() {
        let mut s = tp_lab::run_dir::read_summary(run).unwrap().unwrap();
        (s.wall_seconds, s.sharing_slowdown) = match i % 2 {
            0 => (360.0, Some(1.01)),
            _ => (3.6e6, Some(3.0)),
        };
        let json = serde_json::to_string_pretty(&s).unwrap();
        std::fs::write(run.join("summary.json"), json).unwrap();
    }
    let files = listing(out);
    let one_left = status(d);
    assert!(
        one_left.contains("| report seeds at each choice | 1 | 0 | 0 | 0 | 1 |"),
        "{one_left}"
    );
    assert!(
        one_left.contains("The 1 unfinished runs listed need about 0.1 hours more")
            && one_left.contains("fused"),
        "timed by the unshared runs and its machine named: {one_left}"
    );
    assert!(!one_left.contains("report seeds' "), "listed: {one_left}");
    assert_eq!(listing(out), files, "the status wrote under out/");
}

/// An untuned grid is one round; its unfinished run is timed by its finished sibling (the
/// same setting but for the layout); a tuned sweep's table is not there.
#[test]
fn an_untuned_grids_status_is_one_round_timed_by_its_finished_runs() {
    let d = scratch("sweep-status-grid");
    std::fs::write(
        d.join("sweep.yaml"),
        format!("name: tiny\n{BASE}grid: {{pattern: [tttt, sppp]}}\n"),
    )
    .unwrap();
    assert_ok(&bin("tp-sweep", &d, &["sweep.yaml", "--out", "out"], &[]));
    let done = status(&d);
    assert!(done.contains("| grid | 2 | 2 | 0 | 0 | 0 |"), "{done}");
    assert!(done.contains("Every run listed has ended."), "{done}");
    assert!(
        !done.contains("Tuning") && !done.contains("then:"),
        "{done}"
    );
    std::fs::remove_dir_all(d.join("out/pattern=sppp")).unwrap();
    let one = status(&d);
    assert!(one.contains("| grid | 2 | 1 | 0 | 0 | 1 |"), "{one}");
    assert!(
        one.contains("The 1 unfinished runs listed need about "),
        "{one}"
    );
}
