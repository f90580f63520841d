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

#[cfg(test)]
mod tests {
    #[test]
    fn the_label_names_the_host_and_is_stable() {
        let a = super::label();
        assert!(!a.is_empty());
        assert_eq!(a, super::label());
    }
}
