//! `summary.json`: a finished run's headline numbers, the row a sweep tabulates; written
//! last, so its presence marks a run as finished.

use serde::{Deserialize, Serialize};

/// The headline numbers of a finished run (`summary.json`), what sweeps tabulate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub pattern: String,
    pub tp: usize,
    pub dp: usize,
    pub n_layer: usize,
    pub steps: usize,
    /// TP forward all-reduces per optimiser step (all micro-steps).
    pub forward_allreduces_per_step: f64,
    /// TP forward all-reduces per forward pass, divided by the layers.
    pub allreduces_per_layer: f64,
    pub final_train_loss: Option<f32>,
    /// The whole validation split's loss when the run ended with `final_eval: full`
    /// (then `final_val_tokens` says over how many predictions), else the last sampled
    /// evaluation's.
    pub final_val_loss: Option<f32>,
    #[serde(default)]
    pub final_val_tokens: Option<usize>,
    pub best_val_loss: Option<f32>,
    /// Median of the logged steps' tokens/s (the whole run's log).
    pub tokens_per_s: Option<f64>,
    /// Median wall-clock ms of the logged steps (the whole run's log), the communication
    /// time measured per step (emulated link delays and barrier waits included), their
    /// difference (the compute a link model adds collectives to), and the bytes
    /// all-reduced per step.
    #[serde(default)]
    pub step_ms: Option<f64>,
    /// Communication rank 0 waited for per step (comm.json's measured seconds less the
    /// hidden ones).
    #[serde(default)]
    pub comm_ms_per_step: Option<f64>,
    /// The slowest rank's compute per step as its thread's CPU time (comm.json's
    /// `compute`), else the step less its communication.
    #[serde(default)]
    pub compute_ms_per_step: Option<f64>,
    #[serde(default)]
    pub comm_bytes_per_step: Option<f64>,
    /// Wall-clock seconds of the whole run: every invocation that trained it (a resumed
    /// run's checkpoint carries the time before it), or only the last where the
    /// checkpoint it resumed from predates that count.
    pub wall_seconds: f64,
    /// Where rank 0 ran the invocation that finished the run, the context every speed
    /// figure above needs: the CPU (family and model, cores) and what computed ("fused
    /// avx512 kernels", "portable ops", "cuda"). Absent in runs made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The source that invocation's binary was built from: its commit, "+modified" where
    /// the compiled sources differed from it (lab/build.rs). Absent in runs made before
    /// it was kept and in builds outside a git checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// What that invocation's CPU threads did with subnormal floats: "flushed to zero"
    /// (the default, util/subnormals.rs) or "kept" (`TP_SUBNORMALS=keep`). Absent in runs
    /// made before it was recorded, which kept them, and in GPU runs. A run that stays
    /// clear of them computes the same bits either way; one that does not runs up to ten
    /// times faster flushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnormals: Option<String>,
    /// The harness's environment switches set in that invocation (`TP_SIMD=avx2`,
    /// `TP_STEP_PAUSE_MS=5`, ...: launch/switches.rs); empty for a plain run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<String>,
    /// The data it finished on ([`crate::data::Dataset::fingerprint`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_sha256: Option<String>,
    /// [`super::RankCompute::sharing_slowdown`] of the run's last invocation: above 1.5, the
    /// machine was shared while it trained and `tokens_per_s` says more of that than of the
    /// run (summary tables flag it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing_slowdown: Option<f64>,
    /// The NCCL library's version where the run's groups reduced through NCCL (MPI ranks
    /// with a GPU each); absent otherwise, and in runs made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    /// Each rank's machine where MPI ranks ran on different CPUs or kernels (rank 0's is
    /// `machine`): the same computation, rounded differently on each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_machines: Vec<String>,
    /// The log's notes, `step N: ...` (a resume that continued on other data): a run
    /// with notes is not one uninterrupted experiment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The largest loss a record may hold: a cross-entropy over any vocabulary this harness
/// trains is a few tens at initialisation (ln 50257 = 10.8); a run that ends above this
/// diverged, and a diverged run writes no summary.
pub const MAX_LOSS: f32 = 1000.0;

impl RunSummary {
    /// Why this record cannot be a finished run's, if it cannot: a loss that is negative,
    /// not finite or absurdly large, or a negative wall time.
    pub fn implausible(&self) -> Option<String> {
        let losses = [
            ("final_train_loss", self.final_train_loss),
            ("final_val_loss", self.final_val_loss),
            ("best_val_loss", self.best_val_loss),
        ];
        for (name, loss) in losses {
            if let Some(l) = loss.filter(|l| !(0.0..=MAX_LOSS).contains(l)) {
                return Some(format!(
                    "{name} {l:e} is not a loss (a cross-entropy lies in 0 to {MAX_LOSS})"
                ));
            }
        }
        if !(self.wall_seconds >= 0.0 && self.wall_seconds.is_finite()) {
            return Some(format!(
                "wall_seconds {} is not a duration",
                self.wall_seconds
            ));
        }
        None
    }
}
