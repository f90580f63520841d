//! Which host a process runs on, as the network sees it (the host name and the network
//! namespace), and how much memory it has. Namespaces on one machine
//! (scripts/cluster/netns.sh) are separate hosts with their own addresses and links,
//! though they share the name.

/// `NAME` or `NAME/net:[INODE]` where the namespace can be read (Linux).
pub fn label() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown-host".into());
    match std::fs::read_link("/proc/self/ns/net") {
        Ok(ns) => format!("{name}/{}", ns.display()),
        Err(_) => name,
    }
}

/// Total physical memory of this machine in bytes (Linux), if known.
pub fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The CPU as `lscpu` would name it, with the family and model its marketing name often
/// omits (a VM's "AMD EPYC" is Zen 3 or Zen 4 only by those), and the cores this process
/// may use: "AMD EPYC (family 25 model 17), 2 cores".
pub fn cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let name = field("model name").unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match (field("cpu family"), field("model")) {
        (Some(f), Some(m)) => format!("{name} (family {f} model {m}), {cores} cores"),
        _ => format!("{name}, {cores} cores"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_label_names_the_host_and_is_stable() {
        let a = super::label();
        assert!(!a.is_empty());
        assert_eq!(a, super::label());
    }

    #[test]
    fn the_cpu_is_named_with_its_cores() {
        let cpu = super::cpu();
        let cores = std::thread::available_parallelism().unwrap().get();
        assert!(cpu.ends_with(&format!(", {cores} cores")), "{cpu}");
        assert!(!cpu.starts_with(','), "{cpu}");
    }
}
