//! What a block kind is: every fact of it in one value ([`KindSpec`]), which its own file
//! (`blocks/kinds/<name>.rs`) writes beside its forward and the registry
//! (`blocks/kinds/mod.rs`) lists. Nothing else in the code names a kind's facts, so a new
//! kind is its file and its registry line; the conformance suite
//! (`tests/it/conformance.rs`) then holds it to every proof.

use super::{BlockConfig, BlockTags, Fwd};
use crate::comm::CountedComm;
use crate::tp::ParamBuilder;
use anyhow::Result;
use candle_core::Tensor;

/// How many forward all-reduces a kind synchronises with (blocks.md's count): so many
/// per block, or one per maximal run of consecutive blocks of the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syncs {
    PerBlock(usize),
    PerRun(usize),
}

/// Which of a kind's all-reduces run while the rank computes (the planner's schedule of
/// the kind; the tally counts what the code does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hiding {
    /// None: the rank waits for each sum as it is issued.
    Nothing,
    /// In a run of the kind, each sum runs behind the module after it (the attention
    /// sum behind the block's MLP, the MLP sum behind the next block's attention); the
    /// run's last sum waits at its end. The ladder's schedule.
    BehindNextModule,
}

/// The reference a kind's forward is proved equal to (loss and every gradient, tp 2
/// and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// Dense GPT-2's block: the kind computes the same function at every tp.
    DenseGpt2,
    /// The single-process literal reading of its blocks.md formula that the tests keep
    /// under this letter (`tests/it/common/literal.rs`).
    Literal(char),
    /// None: a test-only kind that is wrong by design.
    None,
}

/// One stage of the block stack: a block, or a maximal run of blocks of a kind staged
/// by run. Its input and output are the replicated stream.
pub trait Stage: Send + Sync {
    fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor>;
}

/// Builds a stage of `len` blocks from layer `first` (`len` is 1 for a kind staged by
/// block).
pub type BuildStage = fn(
    b: &mut ParamBuilder,
    cfg: &BlockConfig,
    first: usize,
    len: usize,
    tp: &CountedComm,
) -> Result<Box<dyn Stage>>;

/// Every fact of a block kind.
pub struct KindSpec {
    /// Its letter in a pattern.
    pub letter: char,
    /// Its name in blocks.md and a line of what it does (help and reports).
    pub name: &'static str,
    pub line: &'static str,
    /// Forward all-reduces (and as many backward): blocks.md's count.
    pub syncs: Syncs,
    /// Of those, the ones a rank waits for with nothing to compute meanwhile.
    pub exposed_syncs: Syncs,
    /// Which of them run behind compute, as the planner schedules it.
    pub hiding: Hiding,
    /// Elements each of its all-reduces carries per token, in units of the model's
    /// width (1: the whole stream).
    pub sync_width: usize,
    /// Whether it computes another function of the same weights at another tp (its
    /// ranks' paths are not summed exactly).
    pub depends_on_tp: bool,
    /// How its replicated parameters live across the TP group (each norm and output
    /// bias), and which output biases it has.
    pub tags: BlockTags,
    /// Whether a maximal run of the kind is one stage of the stack (its blocks pass
    /// something other than the replicated stream between them), or each block is.
    pub staged_by_run: bool,
    pub build: BuildStage,
    /// What its forward is proved equal to.
    pub reference: Reference,
    /// Whether the exported modelling file runs it (by its method `run_<letter>`,
    /// `lab/src/hf/remote/modeling_tp_harness.py`); `tp-export` refuses a kind that is not.
    pub exported: bool,
    /// Whether the stream it hands on is the same on every rank (the invariant every
    /// tag, `f`/`g`, the head and the loss rely on); `false` only for a kind that breaks
    /// it by design (the test-only `x`), which the replicated-activation check must catch.
    pub keeps_stream_replicated: bool,
}
