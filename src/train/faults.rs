//! Fault injection for tests, read once from the environment when a job starts (never
//! per step):
//!
//! - `TP_INJECT_FAULT=RANK:STEP`: that rank fails at the start of that step (one dying
//!   rank must end the whole job, with its message, and hang nobody);
//! - `TP_INJECT_NAN=STEP`: the loss of that step becomes NaN (the guard's tests);
//! - `TP_DUMP_PARAMS=DIR`: each rank writes its own parameters to `DIR/rank<R>.safetensors`
//!   at the end (comparing ranks that live in other processes);
//! - `TP_CHECKPOINT_PAUSE_MS=MS`: checkpoints are held half-written that long (killing a
//!   run mid-write).
//! - `TP_STEP_PAUSE_MS=MS`: rank 0 waits that long after every step and before each
//!   closing phase (the final evaluation, the sample, the closing files), so that kills at
//!   random moments spread over a short run (the kill-and-resume test). Numerics are
//!   unchanged.

use crate::error::user;
use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// (rank, step)
    pub fail_at: Option<(usize, usize)>,
    pub nan_at: Option<usize>,
    pub dump_params: Option<PathBuf>,
    pub checkpoint_pause: Option<Duration>,
    pub step_pause: Option<Duration>,
}

fn number<T: std::str::FromStr>(var: &str, s: &str) -> Result<T> {
    s.trim()
        .parse()
        .map_err(|_| user(format!("{var} must be a number, got `{s}`")))
}

impl Faults {
    /// From the environment; a malformed value is a user error naming the variable.
    pub fn from_env() -> Result<Self> {
        Self::parse(|k| std::env::var(k).ok())
    }

    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let fail_at = match get("TP_INJECT_FAULT") {
            None => None,
            Some(spec) => {
                let Some((r, s)) = spec.split_once(':') else {
                    return Err(user(format!(
                        "TP_INJECT_FAULT must be RANK:STEP, got `{spec}`"
                    )));
                };
                Some((
                    number("TP_INJECT_FAULT's rank", r)?,
                    number("TP_INJECT_FAULT's step", s)?,
                ))
            }
        };
        Ok(Self {
            fail_at,
            nan_at: get("TP_INJECT_NAN")
                .map(|s| number("TP_INJECT_NAN", &s))
                .transpose()?,
            dump_params: get("TP_DUMP_PARAMS").map(PathBuf::from),
            checkpoint_pause: get("TP_CHECKPOINT_PAUSE_MS")
                .map(|s| number::<u64>("TP_CHECKPOINT_PAUSE_MS", &s))
                .transpose()?
                .map(Duration::from_millis),
            step_pause: get("TP_STEP_PAUSE_MS")
                .map(|s| number::<u64>("TP_STEP_PAUSE_MS", &s))
                .transpose()?
                .map(Duration::from_millis),
        })
    }

    /// Waits `TP_STEP_PAUSE_MS` on rank 0, if set.
    pub fn pause(&self, rank: usize) {
        if let (Some(d), 0) = (self.step_pause, rank) {
            std::thread::sleep(d);
        }
    }

    /// Fails if `rank` is to fail at `step`.
    pub fn check(&self, rank: usize, step: usize) -> Result<()> {
        match self.fail_at {
            Some((r, s)) if r == rank && s == step => Err(anyhow::anyhow!(
                "injected fault (TP_INJECT_FAULT={r}:{s}) at step {step}"
            )),
            _ => Ok(()),
        }
    }

    pub fn nan_now(&self, step: usize) -> bool {
        self.nan_at == Some(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn fault_variables_parse_once_and_bad_ones_name_the_variable() {
        let f = Faults::parse(env(&[
            ("TP_INJECT_FAULT", "1:7"),
            ("TP_INJECT_NAN", "3"),
            ("TP_CHECKPOINT_PAUSE_MS", "250"),
        ]))
        .unwrap();
        assert_eq!(f.fail_at, Some((1, 7)));
        assert!(f.nan_now(3) && !f.nan_now(4));
        assert_eq!(f.checkpoint_pause, Some(Duration::from_millis(250)));
        assert!(f.check(1, 7).is_err() && f.check(0, 7).is_ok() && f.check(1, 6).is_ok());
        let e = Faults::parse(env(&[("TP_INJECT_FAULT", "7")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("TP_INJECT_FAULT must be RANK:STEP"), "{e}");
        let e = Faults::parse(env(&[("TP_INJECT_NAN", "soon")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("TP_INJECT_NAN must be a number"), "{e}");
    }
}
