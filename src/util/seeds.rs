//! Every random stream's key, in one place. Each mixes a run's seed (or a pass's key) with
//! where the stream is used, through odd 64-bit multipliers (the golden ratio's and
//! splitmix's), so that the streams of neighbouring steps, passes, layers and ranks never
//! coincide. Changing any of them changes every run's numbers.

/// The batch stream of a split at a step: every data-parallel rank draws the same global
/// batch from it and takes its own slice.
pub fn batch_key(seed: u64, step: u64, split: u64) -> u64 {
    seed.wrapping_mul(0x9E3779B97F4A7C15) ^ step.wrapping_mul(0xD1B54A32D192ED03) ^ (split + 1)
}

/// The dropout key of a forward pass: the same on every rank of a TP group (replicated
/// activations stay identical), different across data-parallel ranks and passes.
pub fn pass_key(seed: u64, pass: u64, dp_rank: u64) -> u64 {
    seed ^ pass.wrapping_mul(0x2545F4914F6CDD1D) ^ (dp_rank << 48)
}

/// The dropout mask's key of one site of one layer within a pass.
pub fn site_key(pass_key: u64, layer: u64, site: u64) -> u64 {
    pass_key.wrapping_mul(0x9E3779B97F4A7C15) ^ ((layer + 1) << 8) ^ site
}
