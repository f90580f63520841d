//! The binaries' allocator (mimalloc) and its one setting that matters here.

/// mimalloc's `mi_option_purge_delay` (index 15 in the `mi_option_e` enum of both the v2
/// and v3 sources that libmimalloc-sys builds).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Keeps freed memory mapped for reuse instead of returning it to the OS 10 ms after a
/// free. A training step frees and reallocates the same few hundred MB of activations and
/// gradients every few milliseconds; with purging on, each of them page-faults back in
/// (~100 faults a step on mini, ~3% of its time). The process's footprint stays at its
/// peak step, which it reaches anyway. Call first thing in `main` of a binary that uses
/// `mimalloc::MiMalloc` as its global allocator.
pub fn keep_freed_memory() {
    // SAFETY: a plain setter of an integer option, valid at any time.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}
