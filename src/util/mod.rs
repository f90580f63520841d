//! Helpers at the bottom of the crate: they import nothing from it, and anything may
//! import them.

pub mod cpu_time;
pub mod fs;
pub mod hash;
pub mod host;
pub mod say;
pub mod seeds;
pub mod subnormals;
pub mod trace;
pub mod turns;

pub use cpu_time::thread_cpu_time;
pub use fs::{fsync_dir, write_atomic};
pub use hash::{fnv1a, sha256_hex};
