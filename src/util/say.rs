//! Printing to standard output that a reader who went away cannot stop. `println!` panics
//! when stdout is a closed pipe (`tp-train ... | head -1`: "failed printing to stdout"),
//! which ended a training run at its second line. [`say!`](crate::say) prints the same,
//! and once stdout is gone stops printing for the rest of the process, while the work
//! (training, the run directory's files) goes on.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static GONE: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout, unless stdout has failed before; a failure (a closed pipe, a
/// full disk behind a redirect) silences stdout from then on.
pub fn write(args: fmt::Arguments, newline: bool) {
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = if newline {
        writeln!(out, "{args}")
    } else {
        write!(out, "{args}")
    };
    if written.and_then(|_| out.flush()).is_err() {
        GONE.store(true, Ordering::Relaxed);
    }
}

/// `println!` that a closed stdout cannot turn into a panic ([`write`]).
#[macro_export]
macro_rules! say {
    () => {
        $crate::util::say::write(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::util::say::write(format_args!($($arg)*), true)
    };
}

/// `print!` that a closed stdout cannot turn into a panic ([`write`]).
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {
        $crate::util::say::write(format_args!($($arg)*), false)
    };
}

/// Writes `line` and a newline to stderr in one write: where several processes share
/// the terminal (ranks under mpirun, and mpirun's own abort banner) a line written in
/// pieces, as `eprintln!` writes its formatted parts to the unbuffered stderr, can be
/// split by another's output ("tp-train: rank " ... banner ... "1: error: ...").
pub fn error_line(line: &str) {
    let mut whole = String::with_capacity(line.len() + 1);
    whole.push_str(line);
    whole.push('\n');
    // Nothing else to tell if stderr itself is gone.
    let _ = std::io::stderr().lock().write_all(whole.as_bytes());
}
