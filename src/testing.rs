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

/// Runs `f` with the streamed path's cuBLASLt chunks ordered from the host (the row kernel on
/// CubeCL's stream, two host waits per chunk) in place of one GPU timeline, for the tests that
/// compare the two routes bit for bit. Process-wide while `f` runs: callers in one process
/// must not overlap. Nothing changes where cuBLASLt does not run.
pub fn host_ordered<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "cube")]
    {
        with_switch(&crate::cube::streamed::routes::SWITCHES.host_ordered, f)
    }
    #[cfg(not(feature = "cube"))]
    {
        f()
    }
}

/// How many streamed steps of this process kept dZ for the whole batch and ran dX and dW as one
/// product each (bf16 with dW wanted and `B <= 2 I`, on cuBLASLt); 0 elsewhere.
pub fn whole_batch_dz_steps() -> u64 {
    #[cfg(feature = "cube")]
    {
        let steps = &crate::cube::streamed::routes::SWITCHES.whole_batch;
        steps.load(std::sync::atomic::Ordering::SeqCst)
    }
    #[cfg(not(feature = "cube"))]
    {
        0
    }
}

/// How many streamed steps of this process ran on one GPU timeline (CUDA with cuBLASLt, the
/// row kernel on cuBLASLt's stream); 0 elsewhere.
pub fn one_timeline_steps() -> u64 {
    #[cfg(feature = "cube")]
    {
        let steps = &crate::cube::streamed::routes::SWITCHES.one_timeline;
        steps.load(std::sync::atomic::Ordering::SeqCst)
    }
    #[cfg(not(feature = "cube"))]
    {
        0
    }
}

/// Runs `f` with the streamed path's TF32 dW computed from X as stored (both operands
/// MN-major) in place of X's transposed chunk, for the benchmark's comparison of the two
/// layouts. Process-wide while `f` runs. Nothing changes where cuBLASLt does not run.
pub fn dw_from_x_as_stored<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "cube")]
    {
        with_switch(&crate::cube::streamed::routes::SWITCHES.dw_as_stored, f)
    }
    #[cfg(not(feature = "cube"))]
    {
        f()
    }
}

/// `f` run with `switch` on.
#[cfg(feature = "cube")]
fn with_switch<T>(switch: &std::sync::atomic::AtomicBool, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering;
    switch.store(true, Ordering::SeqCst);
    let out = f();
    switch.store(false, Ordering::SeqCst);
    out
}
