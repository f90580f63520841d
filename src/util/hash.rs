//! Hashes: a stable, dependency-free one for seeding per-name random streams and naming
//! folders, and SHA-256 for checksums of files (what `sha256sum` prints).

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file's contents as lowercase hex, read in pieces (a corpus may be larger
/// than is worth holding twice).
pub fn file_sha256_hex(path: &std::path::Path) -> std::io::Result<String> {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut h)?;
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// FNV-1a over the bytes of `s`: the same value on every machine and every run.
pub fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn sha256_matches_the_published_test_vectors() {
        assert_eq!(
            super::sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(super::fnv1a(""), 0xcbf29ce484222325);
        assert_eq!(super::fnv1a("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(super::fnv1a("foobar"), 0x85944171f73967e8);
    }
}
