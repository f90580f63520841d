//! A real Slurm (Debian's slurmctld, slurmd and munge as a one-node cluster of this
//! machine, scripts/cluster/slurm.sh): `sbatch scripts/cluster/slurm.sbatch` starts the
//! ranks with srun over PMIx, and the job trains exactly as the threads backend.

use super::*;

/// The cluster of one test, stopped and removed however the test ends.
struct Cluster {
    script: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("down")
            .env("TP_SLURM_DIR", &self.dir)
            .output();
    }
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn sbatch_on_a_one_node_slurm_trains_bit_for_bit_as_the_threads_backend() {
    if !["slurmctld", "slurmd", "munged", "sbatch"]
        .iter()
        .all(|c| have(c))
    {
        eprintln!("skipped: Slurm is not installed (apt-get install slurmd slurmctld slurm-client munge; scripts/test.sh does)");
        return;
    }
    let d = scratch("slurm");
    let root = Path::new(crate::common::REPO);
    let cluster = Cluster {
        script: root.join("scripts/cluster/slurm.sh"),
        dir: d.join("cluster"),
    };
    let up = Command::new(&cluster.script)
        .arg("up")
        .env("TP_SLURM_DIR", &cluster.dir)
        .output()
        .unwrap();
    ok(&up);
    let mut sbatch = with_env(Command::new("sbatch"), &d);
    let o = sbatch
        .env("SLURM_CONF", cluster.dir.join("slurm.conf"))
        .env("TP_HARNESS_BIN", env!("CARGO_BIN_EXE_tp-train"))
        .env("TP_RUN_DIR", "slurm")
        .args(["--wait", "--ntasks", "2", "--output", "job.out"])
        .arg(root.join("scripts/cluster/slurm.sbatch"))
        .args(SMALL)
        .args(["--tp", "2", "--quiet"])
        .output()
        .unwrap();
    let job = std::fs::read_to_string(d.join("job.out")).unwrap_or_default();
    assert!(
        o.status.success(),
        "sbatch: {}\n{job}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        job.contains("2 rank(s) as MPI processes x 1 math thread(s)"),
        "{job}"
    );
    ok(&threads(
        &d,
        &[&SMALL[..], &["--tp", "2", "--out", "threads"]].concat(),
    ));
    assert_losses_close(&d.join("slurm"), &d.join("threads"), 0.0);
    assert_same_counts(&comm(&d.join("slurm")), &comm(&d.join("threads")));
    assert_eq!(
        std::fs::read_to_string(d.join("slurm/sample.txt")).unwrap(),
        std::fs::read_to_string(d.join("threads/sample.txt")).unwrap()
    );
    // A sweep whose launcher is srun starts each point as Slurm tasks the same way.
    std::fs::write(
        d.join("sweep.yaml"),
        "name: s\nbase: {n_embd: 32, max_iters: 4, eval_interval: 2, eval_iters: 1, sample_tokens: 0}\ngrid: {pattern: [tttt]}\nlauncher: {srun: 2}\n",
    )
    .unwrap();
    let mut sweep = with_env(Command::new(env!("CARGO_BIN_EXE_tp-sweep")), &d);
    let o = sweep
        .env("SLURM_CONF", cluster.dir.join("slurm.conf"))
        .args(["sweep.yaml", "--out", "sweep"])
        .output()
        .unwrap();
    ok(&o);
    let log = std::fs::read_to_string(d.join("sweep/logs/pattern=tttt.log")).unwrap();
    assert!(log.contains("2 rank(s) as MPI processes"), "{log}");
    drop(cluster);
    assert!(!d.join("cluster").exists(), "slurm.sh down left its folder");
}
