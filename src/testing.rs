//! Hooks for this crate's own tests; not part of the API a model uses.

/// Runs `f` with the streamed path's chunk buffer (C > 32 on the CubeCL backends) limited to
/// `elements` floats instead of the rule's 48 Mi, so that small test shapes cross many chunks
/// (`elements` below C gives chunks of one row). Process-wide while `f` runs: callers in one
/// process must not overlap (the crate's tests take a lock). A no-op without a CubeCL backend.
pub fn with_chunk_elements<T>(elements: usize, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "cube")]
    {
        use std::sync::atomic::Ordering;
        let cell = &crate::cube::streamed::CHUNK_ELEMENTS_OVERRIDE;
        let before = cell.swap(elements.max(1), Ordering::SeqCst);
        let out = f();
        cell.store(before, Ordering::SeqCst);
        out
    }
    #[cfg(not(feature = "cube"))]
    {
        let _ = elements;
        f()
    }
}

/// Runs `f` and returns what it returned with the most bytes CubeCL's memory pool had in use
/// (every live allocation on the calling thread's stream: inputs, gradients and temporaries)
/// at the streamed path's fullest points (each chunk, its buffers allocated), or 0 where that
/// path did not run. A measure for the benchmark; process-wide while `f` runs, like
/// [`with_chunk_elements`]. The queries cost a server round trip per chunk.
pub fn peak_memory<T>(f: impl FnOnce() -> T) -> (T, u64) {
    #[cfg(feature = "cube")]
    {
        use crate::cube::streamed::{PEAK_BYTES, RECORD_MEMORY};
        use std::sync::atomic::Ordering;
        PEAK_BYTES.store(0, Ordering::SeqCst);
        RECORD_MEMORY.store(true, Ordering::SeqCst);
        let out = f();
        RECORD_MEMORY.store(false, Ordering::SeqCst);
        (out, PEAK_BYTES.load(Ordering::SeqCst))
    }
    #[cfg(not(feature = "cube"))]
    {
        (f(), 0)
    }
}
