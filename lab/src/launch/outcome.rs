//! What one rank's run produced ([`RankOutcome`]) and the outlet through which rank 0
//! shows progress ([`Reporter`]): the job's records of the engine's step records.

use crate::config::RunConfig;
use crate::run_dir::{LogLine, RankCompute};
use anyhow::Result;
use tp_harness::comm::TallySnapshot;
use tp_harness::train::record::{ParamCounts, StepRecord, Tallied};

/// What one rank's run produced.
pub struct RankOutcome {
    pub rank: usize,
    /// The lines written to (rank 0) or computed for (others) `log.jsonl`.
    pub log: Vec<LogLine>,
    /// Every training step this invocation ran, in order.
    pub steps: Vec<StepRecord>,
    /// Everything communicated, including what a resumed run's checkpoint had tallied
    /// before this invocation (`prior`).
    pub tally: TallySnapshot,
    /// Steps and passes the tally covered before this invocation's steps.
    pub prior: Tallied,
    pub sample: String,
    /// This rank's parameters after training, by name (only when asked for).
    pub params: Vec<(String, Vec<f32>)>,
    /// The model's parameters, and those this rank holds (shards and replicated tensors).
    pub param_counts: ParamCounts,
    pub best_val_loss: Option<f32>,
    /// The whole validation split's loss at the end (`final_eval: full`).
    pub final_eval: Option<tp_harness::train::full_eval::SplitLoss>,
    /// Every rank's host ([`tp_harness::util::host::label`]) in rank order, filled in by the
    /// launcher (empty until then).
    pub hosts: Vec<String>,
    /// Every rank's compute per step in this invocation, filled in by the launcher;
    /// `None` where a rank could not measure it or ran no steps.
    pub ranks_compute: Option<RankCompute>,
    /// The NCCL library's version where this rank's groups reduced through NCCL, filled
    /// in by the MPI launcher.
    pub nccl: Option<String>,
    /// This rank's timeline of the traced steps (`trace: true`).
    pub trace: Vec<tp_harness::util::trace::Span>,
}

impl RankOutcome {
    /// Forward (and backward) passes of this invocation's training steps.
    pub fn passes(&self) -> usize {
        self.steps.iter().map(|s| s.passes).sum()
    }

    /// Steps and passes the tally covers: the prior ones and this invocation's.
    pub fn tallied(&self) -> Tallied {
        Tallied {
            steps: self.prior.steps + self.steps.len(),
            passes: self.prior.passes + self.passes(),
        }
    }
}

/// Rank 0's outlet for progress and logs; other ranks have none.
pub trait Reporter {
    fn started(&mut self, _cfg: &RunConfig, _params: ParamCounts) {}
    /// A line of the log, with the rank's communication tally after its step.
    fn logged(&mut self, _line: &LogLine, _comm: &tp_harness::comm::TallySnapshot) -> Result<()> {
        Ok(())
    }
    fn step_done(&mut self, _record: &StepRecord, _tokens_per_s: f64) {}
    /// A resumed run took up its history at `step` (before training it): `comm` is the
    /// tally the checkpoint carried, the one the first invocation had there.
    fn resumed(&mut self, _step: usize, _comm: &tp_harness::comm::TallySnapshot) {}
    fn finished(&mut self) {}
}
