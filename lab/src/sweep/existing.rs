//! What a sweep point's run directory already holds, set against the point: a run of the
//! same config (skipped when finished, resumed when not), a finished run the edited sweep
//! file only lengthens (continued to the new `max_iters`), or a run of another config,
//! which is never taken as the point's result and never deleted: the sweep stops before
//! running anything, naming the keys that differ.

use super::spec::Point;
use crate::run_dir::read_config;
use anyhow::Result;
use std::path::Path;
use tp_harness::user_bail;

/// How a point relates to its run directory.
#[derive(Debug, Clone, PartialEq)]
pub enum Existing {
    /// No run there yet (or a directory a start left before writing its config).
    Nothing,
    /// A run of exactly the point's config.
    Same,
    /// A run of the same config but a shorter `max_iters`, whose steps so far a run of
    /// the point's length would also have taken (the learning-rate schedule does not
    /// follow `max_iters`): continued from its latest checkpoint.
    Shorter { trained_to: usize },
}

/// What `dir` holds for `point`, or one line refusing to go on: a run there of another
/// config is some earlier result, not this point's.
pub fn existing(point: &Point, dir: &Path) -> Result<Existing> {
    if !dir.join(crate::run_dir::CONFIG_FILE).is_file() {
        return Ok(Existing::Nothing);
    }
    let run = read_config(dir)?;
    let diffs = run.computes_otherwise(&point.cfg);
    if diffs.is_empty() {
        return Ok(Existing::Same);
    }
    let (was, now) = (run.optim.max_iters, point.cfg.optim.max_iters);
    let only_length = diffs.iter().all(|(k, _, _)| k == "max_iters");
    // The cosine schedule ends at lr_decay_iters, which follows max_iters unless set:
    // then the steps already trained differ from a longer run's.
    let schedule_fixed = !run.optim.decay_lr || run.optim.lr_decay_iters.is_some();
    if only_length && now > was && schedule_fixed {
        return Ok(Existing::Shorter { trained_to: was });
    }
    let listed: Vec<String> = diffs
        .iter()
        .map(|(k, run, file)| format!("{k} {run} (run) vs {file} (sweep file)"))
        .collect();
    let why = if only_length && now > was {
        " — a longer max_iters moves the end of the cosine schedule (lr_decay_iters follows it), so the steps already trained are not those of the longer run"
    } else {
        ""
    };
    user_bail!(
        "{} was run with another config than the sweep file now gives: {}{why}; its results are kept: restore the sweep file, or move that run directory away to run the point again",
        dir.display(),
        listed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;
    use crate::run_dir::RunDir;
    use tp_harness::train::bucket_cap::BucketCap;

    fn point(cfg: RunConfig) -> Point {
        Point {
            name: "p".into(),
            group: "p".into(),
            cfg,
            keys: Vec::new(),
        }
    }

    /// A run kept from before the default bucket size changed is the point's run (the
    /// same bits); one at another learning rate is refused by key.
    #[test]
    fn a_run_apart_only_in_its_gradient_buckets_is_the_points_and_one_apart_in_lr_is_not() {
        let dir = std::env::temp_dir().join(format!("tp-existing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut kept = RunConfig::default();
        kept.parallel.ddp_bucket_mb = BucketCap::Mib(25.0);
        RunDir::create(&dir).unwrap().write_config(&kept).unwrap();
        let now = RunConfig::default();
        assert_eq!(existing(&point(now.clone()), &dir).unwrap(), Existing::Same);
        let mut other = now;
        other.optim.learning_rate *= 2.0;
        let e = existing(&point(other), &dir).unwrap_err().to_string();
        assert!(
            e.contains("learning_rate") && !e.contains("ddp_bucket_mb"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
