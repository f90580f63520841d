//! Subnormal floats flushed to zero on the threads that compute. A float below 2^-126
//! in magnitude (f32) costs an x86 core a microcode assist on each operation that reads
//! or writes it, some hundred times a normal FMA; a training run whose activations or
//! gradients drift into that range (a learning rate past its stable edge: 12 x 128 at
//! lr 0.016 went from 80 ms to 900 ms a step on a Xeon) then runs ten times slower for
//! no benefit. The x86 MXCSR register's flush-to-zero (results) and denormals-are-zero
//! (inputs) bits, set on every thread that does a run's arithmetic, make them zeros, as
//! TensorFlow and XLA do on their CPU threads. `TP_SUBNORMALS=keep` leaves them (IEEE
//! gradual underflow, what runs did before), to compare. The bits are per thread, so
//! every thread that computes sets them: the launchers' rank threads, their rayon pools
//! and the communication workers, which sum tensors.

use std::sync::OnceLock;

/// MXCSR bit 15 flushes results to zero, bit 6 reads subnormal inputs as zero; SSE, AVX
/// and AVX-512 arithmetic all follow them.
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

/// What `TP_SUBNORMALS` asks for: `Ok(true)` to flush (unset, empty or `flush`),
/// `Ok(false)` for `keep`, an error naming the two otherwise (config validation reports
/// it before a run starts).
pub fn from_env() -> Result<bool, String> {
    match std::env::var("TP_SUBNORMALS") {
        Err(_) => Ok(true),
        Ok(v) => match v.trim() {
            "" | "flush" => Ok(true),
            "keep" => Ok(false),
            _ => Err(format!(
                "TP_SUBNORMALS={v} is not a choice: use keep (IEEE gradual underflow) or flush (the default), or unset it"
            )),
        },
    }
}

/// Whether this process's threads flush subnormals (read once; x86-64 only).
pub fn flushed() -> bool {
    static FLUSH: OnceLock<bool> = OnceLock::new();
    *FLUSH.get_or_init(|| cfg!(target_arch = "x86_64") && from_env().unwrap_or(true))
}

/// Sets flush-to-zero and denormals-are-zero on the calling thread, unless
/// `TP_SUBNORMALS=keep`.
pub fn flush_on_this_thread() {
    if !flushed() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // Inline assembly because the intrinsics (_mm_setcsr) are deprecated.
        let mut csr: u32 = 0;
        // SAFETY: stmxcsr/ldmxcsr read and write the calling thread's MXCSR through a
        // valid, aligned u32; only the two flush bits change.
        unsafe {
            std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack));
            csr |= FTZ_DAZ;
            std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack));
        }
    }
}

/// Sets it on the calling thread and on every thread of rayon's global pool (which it
/// starts if it has not started: call it once the pool's size is configured).
pub fn flush_here_and_in_the_global_pool() {
    flush_on_this_thread();
    rayon::broadcast(|_| flush_on_this_thread());
}

/// Whether the calling thread flushes (its MXCSR's two bits), for tests.
pub fn this_thread_flushes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let mut csr: u32 = 0;
        // SAFETY: as above, a read of the thread's MXCSR.
        unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack)) };
        csr & FTZ_DAZ == FTZ_DAZ
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flushing_thread_reads_and_makes_subnormals_as_zero() {
        if !flushed() {
            return; // TP_SUBNORMALS=keep: nothing to check
        }
        let tiny = std::hint::black_box(f32::MIN_POSITIVE);
        let sub = std::hint::black_box(f32::from_bits(1)); // the least subnormal
        let (made, read) = std::thread::spawn(move || {
            flush_on_this_thread();
            assert!(this_thread_flushes());
            (
                std::hint::black_box(tiny) / 4.0,
                std::hint::black_box(sub) * 2.0,
            )
        })
        .join()
        .unwrap();
        assert_eq!((made, read), (0.0, 0.0));
        // A thread that did not ask keeps gradual underflow.
        let kept = std::thread::spawn(move || std::hint::black_box(tiny) / 4.0)
            .join()
            .unwrap();
        assert_eq!(kept, f32::MIN_POSITIVE / 4.0);
    }
}
