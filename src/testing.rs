//! The streamed path's peak memory, for the benchmark and the memory tests. Built with the
//! `testing` feature only (the `burn-fused-head-testing` crate turns it on): no production
//! build has it, so nothing here can change or observe a user's call.

/// Runs `f` and returns what it returned with the most bytes CubeCL's memory pool had in use
/// (every live allocation on the calling thread's stream: inputs, gradients and temporaries)
/// at the streamed path's fullest points (each chunk, its buffers allocated), or 0 where that
/// path did not run. Process-wide while `f` runs: callers in one process must not overlap.
/// The queries cost a server round trip per chunk.
pub fn peak_memory<T>(f: impl FnOnce() -> T) -> (T, u64) {
    #[cfg(feature = "cube")]
    {
        use crate::cube::streamed::peak::{BYTES, RECORD};
        use std::sync::atomic::Ordering;
        BYTES.store(0, Ordering::SeqCst);
        RECORD.store(true, Ordering::SeqCst);
        let out = f();
        RECORD.store(false, Ordering::SeqCst);
        (out, BYTES.load(Ordering::SeqCst))
    }
    #[cfg(not(feature = "cube"))]
    {
        (f(), 0)
    }
}
