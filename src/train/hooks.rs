//! Hooks at the points where a real failure can strike a run: a rank dying at the start
//! of a step, a NaN loss, a pause between steps and closing phases, a checkpoint held
//! half-written, each rank's parameters written out at the end. Training calls the
//! [`Hooks`] trait there, which does nothing by default ([`NoHooks`]); the harness's own
//! tests install [`Faults`], read once from the environment when a job starts (the only
//! way to reach ranks that live in other processes under `mpirun`):
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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What a run lets a test do to it. Every method's default does nothing.
pub trait Hooks: Send + Sync {
    /// At the start of `step` on `rank`: an error here is that rank dying there.
    fn before_step(&self, _rank: usize, _step: usize) -> Result<()> {
        Ok(())
    }
    /// Whether the loss of `step` is to become NaN.
    fn poison_loss(&self, _step: usize) -> bool {
        false
    }
    /// After every step and before each closing phase, on `rank`.
    fn between_phases(&self, _rank: usize) {}
    /// How long a checkpoint is held half-written.
    fn checkpoint_pause(&self) -> Option<Duration> {
        None
    }
    /// Where each rank writes its own parameters at the end.
    fn dump_params(&self) -> Option<&Path> {
        None
    }
}

/// A run left alone: what every user's run gets.
pub struct NoHooks;
impl Hooks for NoHooks {}

/// The hooks the environment asks for: [`NoHooks`] when it sets none of the variables.
pub fn from_env() -> Result<Arc<dyn Hooks>> {
    let faults = Faults::parse(|k| std::env::var(k).ok())?;
    Ok(if faults == Faults::default() {
        Arc::new(NoHooks)
    } else {
        Arc::new(faults)
    })
}

/// The faults the `TP_*` variables ask for.
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
    /// From a variable lookup; a malformed value is a user error naming the variable.
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
}

impl Hooks for Faults {
    fn before_step(&self, rank: usize, step: usize) -> Result<()> {
        match self.fail_at {
            Some((r, s)) if r == rank && s == step => Err(anyhow::anyhow!(
                "injected fault (TP_INJECT_FAULT={r}:{s}) at step {step}"
            )),
            _ => Ok(()),
        }
    }
    fn poison_loss(&self, step: usize) -> bool {
        self.nan_at == Some(step)
    }
    fn between_phases(&self, rank: usize) {
        if let (Some(d), 0) = (self.step_pause, rank) {
            std::thread::sleep(d);
        }
    }
    fn checkpoint_pause(&self) -> Option<Duration> {
        self.checkpoint_pause
    }
    fn dump_params(&self) -> Option<&Path> {
        self.dump_params.as_deref()
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
        assert!(f.poison_loss(3) && !f.poison_loss(4));
        assert_eq!(f.checkpoint_pause, Some(Duration::from_millis(250)));
        assert!(f.before_step(1, 7).is_err() && f.before_step(0, 7).is_ok());
        assert!(f.before_step(1, 6).is_ok());
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
