//! Every value of a run's config, checked before anything is allocated: each failure is
//! one line naming the key and the fix.

use super::RunConfig;
use anyhow::Result;
use tp_harness::device::DeviceKind;
use tp_harness::error::user;
use tp_harness::train::bucket_cap::BucketCap;
use tp_harness::user_bail;

/// What `--trace` keeps in memory per traced step, per layer and rank (measured, with
/// margin), and the most a trace may hold.
const TRACE_BYTES_PER_LAYER_RANK_STEP: f64 = 30e3;
const TRACE_MEMORY_CAP: f64 = 256e6;

fn finite_at_least(key: &str, v: f64, min: f64) -> Result<()> {
    if !v.is_finite() || v < min {
        user_bail!("{key} must be a number >= {min}, got {v}");
    }
    Ok(())
}

fn in_unit_interval(key: &str, v: f64) -> Result<()> {
    if !(0.0..1.0).contains(&v) {
        user_bail!("{key} must be in [0, 1), got {v}");
    }
    Ok(())
}

/// The most tokens a run's closing sample may have: it is a glimpse of the model (300 by
/// default), written with the run's files; tp-sample writes longer text.
pub const MAX_CLOSING_SAMPLE: usize = 10_000;

impl RunConfig {
    /// Everything that can be checked before data is loaded or a rank starts.
    /// Every traced span stays in memory until the run ends (~30 KB a step per layer and
    /// rank, measured: 366 MB for 1500 steps of mini at tp 2): a long trace is a slow way
    /// to run out of memory, refused up front.
    fn check_trace_memory(&self) -> Result<()> {
        let per_step = (self.model.arch.n_layer.max(1)
            * self.parallel.tp
            * self.parallel.dp
            * self.optim.gradient_accumulation_steps.max(1)) as f64
            * TRACE_BYTES_PER_LAYER_RANK_STEP;
        let bytes = self.eval.trace_steps as f64 * per_step;
        if self.eval.trace && bytes > TRACE_MEMORY_CAP {
            user_bail!(
                "trace_steps {} would hold about {:.0} MB of spans in memory until the run ends: trace at most {} steps of this run (trace_start picks which; a few show a step's pattern)",
                self.eval.trace_steps,
                bytes / 1e6,
                (TRACE_MEMORY_CAP / per_step) as usize
            );
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        let layout = self.layout();
        let arch = &self.model.arch;
        layout.agrees_with_n_layer(arch.n_layer).map_err(user)?;
        if self.model.text_tokenizer.is_some() && self.model.dataset != crate::data::TEXT {
            user_bail!(
                "text_tokenizer chooses how a `text` corpus is tokenized, but the dataset is {}: drop it, or set dataset=text with text_path",
                self.model.dataset
            );
        }
        let o = &self.optim;
        let e = &self.eval;
        if e.trace && (e.trace_steps == 0 || e.trace_start >= o.max_iters) {
            user_bail!(
                "trace_start {} and trace_steps {} trace no step of a run of max_iters {}: give steps inside it, e.g. --set trace_start=0 --set trace_steps=3",
                e.trace_start,
                e.trace_steps,
                o.max_iters
            );
        }
        self.check_trace_memory()?;
        for (k, v) in [
            ("tp", self.parallel.tp),
            ("dp", self.parallel.dp),
            ("batch_size", o.batch_size),
            ("gradient_accumulation_steps", o.gradient_accumulation_steps),
            ("block_size", arch.block_size),
            ("log_interval", self.eval.log_interval),
        ] {
            if v == 0 {
                user_bail!("{k} must be at least 1");
            }
        }
        // PyTorch's AdamW refuses the same values.
        finite_at_least("learning_rate", o.learning_rate, 0.0)?;
        finite_at_least("min_lr", o.min_lr, 0.0)?;
        finite_at_least("weight_decay", o.weight_decay, 0.0)?;
        finite_at_least("adam_eps", o.adam_eps, 0.0)?;
        finite_at_least("grad_clip", o.grad_clip, 0.0)?;
        in_unit_interval("beta1", o.beta1)?;
        in_unit_interval("beta2", o.beta2)?;
        in_unit_interval("dropout", o.dropout)?;
        if let Err(e) = self.parallel.device.check_built() {
            user_bail!("{e}");
        }
        if let Err(e) = tp_harness::ops::cpu::simd::from_env() {
            user_bail!("{e}");
        }
        if let Err(e) = tp_harness::util::subnormals::from_env() {
            user_bail!("{e}");
        }
        let switches = [
            tp_harness::util::turns::one_at_a_time_from_env().err(),
            tp_harness::comm::mpi_env::comm_thread().err(),
            tp_harness::comm::mpi_env::poll_us().err(),
        ];
        if let Some(e) = switches.into_iter().flatten().next() {
            user_bail!("{e}");
        }
        // The key chooses the CPU kernels' products: a GPU run needs no BLAS.
        if self.parallel.device == DeviceKind::Cpu {
            if let Err(e) = tp_harness::ops::cpu::gemm::route::resolve(self.parallel.matmul) {
                user_bail!("{e}");
            }
        }
        finite_at_least("link_gbps", self.parallel.link_gbps, 0.0)?;
        finite_at_least("link_latency_us", self.parallel.link_latency_us, 0.0)?;
        if let BucketCap::Mib(mb) = self.parallel.ddp_bucket_mb {
            if !(mb > 0.0 && mb.is_finite()) {
                user_bail!(
                    "ddp_bucket_mb must be auto (sized for the model) or a positive number of MiB (25 as PyTorch's DDP), got {mb}"
                );
            }
        }
        if !(self.eval.sample_temperature > 0.0 && self.eval.sample_temperature.is_finite()) {
            user_bail!(
                "sample_temperature must be a positive number, got {}",
                self.eval.sample_temperature
            );
        }
        if self.eval.sample_tokens > MAX_CLOSING_SAMPLE {
            user_bail!(
                "sample_tokens must be at most {MAX_CLOSING_SAMPLE} (the run's closing sample is a glimpse of the model; tp-sample RUN --tokens N writes longer text), got {}",
                self.eval.sample_tokens
            );
        }
        if self.eval.eval_interval > 0 && self.eval.eval_iters == 0 {
            user_bail!("eval_iters must be at least 1 when eval_interval is set (or set eval_interval to 0)");
        }
        // Before the data is read an unset vocabulary is a placeholder of 1: how it splits
        // over the group is checked once it is known.
        self.model_config(1)
            .and_then(|mut m| {
                m.vocab_parallel &= self.model.arch.vocab_size != 0;
                m.check(self.parallel.tp)
            })
            .map_err(user)?;
        Ok(())
    }

    /// Checks that need the data's size: enough tokens for one window of each split, and
    /// a model whose state fits this machine's memory at all (the GPU's, on a GPU).
    pub fn check_against_data(
        &self,
        train_tokens: usize,
        val_tokens: usize,
        vocab: usize,
    ) -> Result<()> {
        let t = self.model.arch.block_size;
        for (split, n) in [("train", train_tokens), ("val", val_tokens)] {
            if n <= t + 1 {
                user_bail!(
                    "the {split} split of {} has {n} tokens, too few for block_size {t}: lower block_size below {}",
                    self.model.dataset,
                    n.saturating_sub(1)
                );
            }
        }
        let m = self.model_config(vocab)?;
        // u128: sizes from hostile input must not wrap around to a small need.
        let (v, c, l) = (m.vocab_size as u128, m.n_embd as u128, m.n_layer as u128);
        let rows = (self.optim.batch_size as u128) * t as u128;
        // A lower bound for one machine, which holds at least one whole TP group (f32):
        // - the weights, gradients and two AdamW moments of the logical model;
        // - one replica's logits and their gradient;
        // - the activations the backward pass keeps, at least 10 values per row and
        //   layer per unit of width (measured: 24-37 with the attention matrices, at
        //   tp 1; more at higher tp, where replicated ones are held once per rank).
        let params = v * c + t as u128 * c + 12 * l * c * c;
        let logits = rows * v * 2;
        let activations = l * rows * 10 * c;
        let need = (params * 4 + logits + activations) * 4;
        // On a GPU the passes' memory is the GPU's, not the host's. A TP group may span tp
        // GPUs (MPI), each holding at least a tp-th of it: the bound a GPU must meet.
        let (have, holder, need) = match self.parallel.device {
            tp_harness::device::DeviceKind::Cuda => (
                tp_harness::device::gpu_memory(0),
                "GPU 0",
                need / self.parallel.tp.max(1) as u128,
            ),
            tp_harness::device::DeviceKind::Cpu => (
                tp_harness::util::host::physical_memory(),
                "this machine",
                need,
            ),
        };
        if let Some(have) = have.filter(|&have| need > have as u128) {
            let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
            user_bail!(
                "this run needs at least {:.1} GiB (weights, gradients, optimiser state, activations and logits) but {holder} has {:.1} GiB: lower n_layer, n_embd, block_size, batch_size or the vocabulary",
                gib(need),
                gib(have as u128)
            );
        }
        Ok(())
    }
}
