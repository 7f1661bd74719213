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
