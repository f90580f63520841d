//! Memory per rank of a planned step, the way Megatron's papers count it: the weights,
//! gradients and AdamW's state of the rank's parameters (16 bytes a parameter in f32
//! training; 18 in bf16 mixed precision: bf16 weights, f32 gradients, an f32 master copy
//! and two f32 moments), and the activations a step keeps for backward by Korthikanti et
//! al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", eq. 2:
//! s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes a layer with 16-bit activations and tensor
//! parallelism without sequence parallelism; twice that in f32), plus the embedding and
//! the output layer's 4·s·b·h·(1 + v/h) with a replicated head, 4·s·b·h·(1 + v/(h·t))
//! with a vocabulary-parallel one (each rank keeps its slice of the logits). s and p
//! blocks keep what t blocks keep (the same linears and attention).
//! With a device's memory, the largest batch whose total fits 90% of it (the rest: the
//! CUDA context, NCCL's buffers, the allocator's fragmentation).

use super::request::Request;

/// The share of a device's memory a plan lets a step use.
pub const USABLE: f64 = 0.9;

/// One rank's memory at the requested batch, in GiB.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Memory {
    /// Bytes a parameter for weights + gradients + optimizer state, and why.
    pub bytes_per_param: f64,
    pub precision: String,
    pub weights_grads_optimizer_gib: f64,
    /// Activations kept for backward at the requested batch, and per sequence.
    pub activations_gib: f64,
    pub activations_per_sequence_gib: f64,
    pub total_gib: f64,
    /// The device's memory (GiB) and where the number comes from, if known.
    pub device_gib: Option<f64>,
    pub device_source: Option<String>,
    /// The most sequences a rank's step can hold within [`USABLE`] of the device.
    pub largest_batch: Option<usize>,
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `r`'s memory per rank; `bf16`: mixed-precision training (a GPU), else f32; `device`:
/// its memory in GB (10^9 bytes) and the source.
pub fn memory(r: &Request, bf16: bool, device: Option<(f64, &str)>) -> Memory {
    let s = &r.shape;
    let (seq, h, a) = (s.block as f64, s.n_embd as f64, s.n_head as f64);
    let t = r.tp as f64;
    let bytes_per_param = if bf16 { 18.0 } else { 16.0 };
    let scale = if bf16 { 1.0 } else { 2.0 };
    let per_layer = seq * h * (10.0 + 24.0 / t + 5.0 * a * seq / (h * t));
    let head = 4.0 * seq * h * (1.0 + r.vocab_rows() / h);
    let per_sequence = scale * (s.n_layer as f64 * per_layer + head);
    let fixed = bytes_per_param * r.params_per_rank();
    let activations = per_sequence * r.batch as f64;
    let device_bytes = device.map(|(gb, _)| gb * 1e9);
    let largest_batch =
        device_bytes.map(|d| ((USABLE * d - fixed) / per_sequence).floor().max(0.0) as usize);
    Memory {
        bytes_per_param,
        precision: match bf16 {
            true => "bf16 mixed precision: bf16 weights, f32 gradients, f32 master and two f32 AdamW moments (18 bytes a parameter)".into(),
            false => "f32: weights, gradients and two AdamW moments (16 bytes a parameter)".into(),
        },
        weights_grads_optimizer_gib: fixed / GIB,
        activations_gib: activations / GIB,
        activations_per_sequence_gib: per_sequence / GIB,
        total_gib: (fixed + activations) / GIB,
        device_gib: device_bytes.map(|d| d / GIB),
        device_source: device.map(|(_, src)| src.to_string()),
        largest_batch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::request::{Head, Shape};
    use tp_harness::blocks::BlockLayout;

    /// GPT-2 124M (vocab padded to 50304, as nanoGPT's) at tp 1, batch 8 x 1024, bf16, by
    /// hand: a layer keeps 1024·768·(10 + 24 + 5·12·1024/768) = 1024·768·114 = 89,653,248
    /// bytes; twelve of them and the head's 4·1024·(768 + 50304) = 209,190,912 make
    /// 1,285,029,888 bytes a sequence (1.197 GiB); 124.5 M parameters at 18 bytes are
    /// 2.09 GiB. An 80 GB H100 at 90% holds (72e9 - 18·params) / 1,285,029,888 = 54.
    #[test]
    fn gpt2_124m_memory_matches_the_formula_by_hand() {
        let shape = Shape::named("gpt2").unwrap();
        let r = Request {
            shape,
            layout: BlockLayout::parse("12xt").unwrap(),
            tp: 1,
            dp: 1,
            batch: 8,
            comm_dtype: Default::default(),
            bucket_mb: Default::default(),
            head: Head::Replicated,
        };
        let m = memory(&r, true, Some((80.0, "H100")));
        let per_seq = 12.0 * 89_653_248.0 + 209_190_912.0;
        assert!(
            (m.activations_per_sequence_gib * GIB - per_seq).abs() < 1.0,
            "{m:?}"
        );
        assert!((m.activations_gib - 8.0 * per_seq / GIB).abs() < 1e-9);
        let fixed = 18.0 * r.params_per_rank();
        assert!((m.weights_grads_optimizer_gib * GIB - fixed).abs() < 1.0);
        assert!(
            (r.params_per_rank() / 1e6 - 124.5).abs() < 0.1,
            "{}",
            r.params_per_rank()
        );
        assert_eq!(
            m.largest_batch,
            Some(((72e9 - fixed) / per_seq).floor() as usize)
        );
        assert_eq!(m.largest_batch, Some(54));
        // At tp 4 a layer keeps less (24/t and the scores split), a replicated head does
        // not; a vocabulary-parallel one keeps its quarter of the logits,
        // 4·1024·(768 + 12576) bytes, and holds a quarter of the embedding.
        let tp4 = memory(&Request { tp: 4, ..r.clone() }, true, None);
        assert!(tp4.activations_per_sequence_gib < m.activations_per_sequence_gib);
        assert_eq!(tp4.largest_batch, None);
        let split = Request {
            tp: 4,
            head: Head::VocabParallel,
            ..r.clone()
        };
        let vp = memory(&split, true, None);
        let head_saved = 4.0 * 1024.0 * (50304.0 - 12576.0);
        assert!(
            ((tp4.activations_per_sequence_gib - vp.activations_per_sequence_gib) * GIB
                - head_saved)
                .abs()
                < 1.0
        );
        assert_eq!(
            (Request { tp: 4, ..r.clone() }).params_per_rank() - split.params_per_rank(),
            (50304.0 - 12576.0) * 768.0
        );
    }
}
