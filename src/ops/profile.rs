//! Per-op time, like llm.c's profile: every fused kernel and every matmul adds its
//! wall-clock time to a counter of the calling thread (one rank each under the threads
//! backend). Two `Instant::now()` a call, about a hundred calls a step: always on.

use serde::Serialize;
use std::cell::RefCell;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    MatmulFwd,
    MatmulBwd,
    AttentionFwd,
    AttentionBwd,
    LayernormFwd,
    LayernormBwd,
    GeluFwd,
    GeluBwd,
    /// Fused log-softmax + cross-entropy, forward and backward.
    CrossEntropy,
    AdamW,
}

impl OpKind {
    pub const ALL: [OpKind; 10] = [
        OpKind::MatmulFwd,
        OpKind::MatmulBwd,
        OpKind::AttentionFwd,
        OpKind::AttentionBwd,
        OpKind::LayernormFwd,
        OpKind::LayernormBwd,
        OpKind::GeluFwd,
        OpKind::GeluBwd,
        OpKind::CrossEntropy,
        OpKind::AdamW,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::MatmulFwd => "matmul forward",
            OpKind::MatmulBwd => "matmul backward",
            OpKind::AttentionFwd => "attention forward",
            OpKind::AttentionBwd => "attention backward",
            OpKind::LayernormFwd => "layernorm forward",
            OpKind::LayernormBwd => "layernorm backward",
            OpKind::GeluFwd => "gelu forward",
            OpKind::GeluBwd => "gelu backward",
            OpKind::CrossEntropy => "softmax + cross-entropy",
            OpKind::AdamW => "AdamW",
        }
    }
}

/// Seconds and FLOPs spent in each [`OpKind`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpTimes {
    pub seconds: [f64; 10],
    pub flops: [f64; 10],
}

impl OpTimes {
    pub fn get(&self, k: OpKind) -> (f64, f64) {
        (self.seconds[k as usize], self.flops[k as usize])
    }
}

thread_local! {
    static TIMES: RefCell<OpTimes> = RefCell::new(OpTimes::default());
}

/// Runs `f`, adding its time (and `flops`) to `kind` on this thread.
pub fn timed<R>(kind: OpKind, flops: f64, f: impl FnOnce() -> R) -> R {
    let t0 = Instant::now();
    let r = f();
    let dt = t0.elapsed().as_secs_f64();
    TIMES.with(|t| {
        let mut t = t.borrow_mut();
        t.seconds[kind as usize] += dt;
        t.flops[kind as usize] += flops;
    });
    r
}

/// This thread's totals so far, resetting them to zero.
pub fn take() -> OpTimes {
    TIMES.with(|t| std::mem::take(&mut *t.borrow_mut()))
}
