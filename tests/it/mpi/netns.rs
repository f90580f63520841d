//! MPI ranks on two network-namespace hosts over a shaped link.

use super::*;

/// Two hosts (network namespaces, scripts/cluster/netns.sh) of two ranks each, joined by
/// a 1 Gbit/s shaped link, OpenMPI over TCP between them: tp 2 x dp 2 with each TP group
/// inside a host trains exactly as the threads backend (bit for bit), and comm.json
/// records which host each rank ran on. Needs root, as the test command runs.
#[test]
fn two_netns_hosts_tp2_dp2_over_a_shaped_link_equal_the_threads_backend_bitwise() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(String::from))
        })
        .unwrap_or_default();
    assert_eq!(
        uid, "0",
        "network namespaces need root: run the test command (scripts/test.sh) as root"
    );
    let d = scratch("netns");
    let script = Path::new(crate::common::REPO).join("scripts/cluster/netns.sh");
    let o = with_env(Command::new(&script), &d)
        .args(["run", "2", "--slots", "2", "--rate", "1gbit", "--"])
        .arg(env!("CARGO_BIN_EXE_tp-train"))
        .args(SMALL)
        .args(["--tp", "2", "--quiet", "--out", "hosts"])
        .output()
        .unwrap();
    ok(&o);
    ok(&threads(
        &d,
        &[&SMALL[..], &["--tp", "2", "--dp", "2", "--out", "threads"]].concat(),
    ));
    assert_losses_close(&d.join("hosts"), &d.join("threads"), 0.0);
    let (ch, ct) = (comm(&d.join("hosts")), comm(&d.join("threads")));
    assert_same_counts(&ch, &ct);
    let hosts: Vec<&str> = ch["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 4, "{hosts:?}");
    assert!(
        hosts[0].starts_with("tpn-h1/") && hosts[2].starts_with("tpn-h2/"),
        "{hosts:?}"
    );
    assert_eq!(
        (hosts[0], hosts[2]),
        (hosts[1], hosts[3]),
        "TP groups share a host"
    );
    assert_ne!(hosts[0], hosts[2]);
    assert_eq!(
        std::fs::read_to_string(d.join("hosts").join("sample.txt")).unwrap(),
        std::fs::read_to_string(d.join("threads").join("sample.txt")).unwrap()
    );
    // Nothing of the cluster is left behind.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ns.stdout).contains("tpn-"));
}
