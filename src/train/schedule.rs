//! Learning-rate schedule: linear warmup, then cosine decay to `min_lr` (nanoGPT's get_lr).

#[derive(Debug, Clone, Copy)]
pub struct CosineSchedule {
    pub learning_rate: f64,
    pub min_lr: f64,
    pub warmup_iters: usize,
    pub lr_decay_iters: usize,
    pub decay: bool,
}

impl CosineSchedule {
    pub fn lr(&self, step: usize) -> f64 {
        if !self.decay {
            return self.learning_rate;
        }
        if step < self.warmup_iters {
            return self.learning_rate * (step + 1) as f64 / (self.warmup_iters + 1) as f64;
        }
        if step > self.lr_decay_iters {
            return self.min_lr;
        }
        let span = (self.lr_decay_iters - self.warmup_iters).max(1) as f64;
        let ratio = (step - self.warmup_iters) as f64 / span;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
        self.min_lr + coeff * (self.learning_rate - self.min_lr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_rises_linearly_then_cosine_falls_to_min_lr() {
        let s = CosineSchedule {
            learning_rate: 1e-3,
            min_lr: 1e-4,
            warmup_iters: 100,
            lr_decay_iters: 2000,
            decay: true,
        };
        assert!((s.lr(0) - 1e-3 / 101.0).abs() < 1e-12);
        assert!((s.lr(100) - 1e-3).abs() < 1e-12);
        assert!((s.lr(1050) - 5.5e-4).abs() < 1e-9);
        assert!((s.lr(2000) - 1e-4).abs() < 1e-12);
        assert_eq!(s.lr(5000), 1e-4);
        assert!(s.lr(500) > s.lr(600));
    }
}
