//! User-facing errors: bad input that the user can fix. Binaries print them as one line
//! and exit with code 2; anything else is an internal failure (exit code 1).

use std::fmt;

#[derive(Debug, Clone)]
pub struct UserError(pub String);

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

/// `bail!`-like constructor for user errors.
#[macro_export]
macro_rules! user_bail {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::error::UserError(format!($($arg)*))))
    };
}

/// Turns any error into a user error (same message).
pub fn user(e: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(UserError(e.to_string()))
}

/// Whether an error chain carries a user error anywhere.
pub fn is_user_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<UserError>().is_some())
}

/// An error another rank already reported: exit with `0` (the code) and print nothing,
/// so that a job of many ranks says one thing once.
#[derive(Debug, Clone, Copy)]
pub struct AlreadyReported(pub i32);

impl fmt::Display for AlreadyReported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reported by another rank (exit code {})", self.0)
    }
}

impl std::error::Error for AlreadyReported {}

/// The exit code for an error: 2 for user errors, 1 otherwise, or what another rank chose.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if let Some(r) = e.chain().find_map(|c| c.downcast_ref::<AlreadyReported>()) {
        return r.0;
    }
    if is_user_error(e) {
        2
    } else {
        1
    }
}
