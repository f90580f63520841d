//! Which host a process runs on, as the network sees it: the host name and the network
//! namespace. Namespaces on one machine (scripts/netns-cluster.sh) are separate hosts
//! with their own addresses and links, though they share the name.

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

#[cfg(test)]
mod tests {
    #[test]
    fn the_label_names_the_host_and_is_stable() {
        let a = super::label();
        assert!(!a.is_empty());
        assert_eq!(a, super::label());
    }
}
