//! Checkpoints: the logical (unsharded) weights and AdamW moments as safetensors, and a
//! JSON sidecar with the resolved config, the step, the optimiser step count and the best
//! validation loss. Because weights are logical, a checkpoint loads at any tp and dp.
//!
//! BlockLayout: `RUN/checkpoints/step-000500/{model.safetensors, optimizer.m.safetensors,
//! optimizer.v.safetensors, meta.json, SHA256SUMS}` and `RUN/checkpoints/latest` (the
//! newest directory's name). A checkpoint is written into a temporary directory, every
//! file fsynced, then renamed into place; `latest` is replaced atomically afterwards. A
//! kill at any moment leaves the previous checkpoint and `latest` intact.
//!
//! Integrity: `SHA256SUMS` holds the SHA-256 of every other file (in `sha256sum`'s format,
//! so `sha256sum -c SHA256SUMS` checks a checkpoint by hand). Every load verifies the
//! files it reads against it and refuses non-finite values, naming the file and an
//! earlier checkpoint to fall back to. Tools that need only the weights (evaluation,
//! sampling, export, scans, `init_from`) read only `model.safetensors` and `meta.json`.
//!
//! History: `meta.json` also carries the run's communication tally up to the checkpoint
//! ([`RunHistory`]), so a resumed run reports the whole run's communication, not only
//! the steps after the resume.
//!
//! A temporary directory left by a write that failed (a full disk, a kill) is removed by
//! the next write or resume of the run ([`remove_partial`]).
//!
//! Random state: batches and dropout masks are drawn from streams keyed by (seed, step),
//! so the data position and RNG state of a checkpoint are its `step` and the config's
//! `seed`; nothing else needs saving.

mod load;
mod meta;
mod write;

pub use load::{is_inside, latest, Checkpoint, Moments};
pub use meta::{CheckpointMeta, CommShape, ParamInfo, RunHistory, CHECKPOINTS, SUMS_FILE};
pub use write::{remove_partial, write, CheckpointState, CheckpointTensors};
