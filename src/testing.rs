//! The streamed path's peak memory, routes and timeline, for the benchmark and the tests.
//! Built with the `testing` feature only (the `burn-fused-head-testing` crate turns it on): no production
//! build has it, so nothing here can change or observe a user's call.

/// Runs `f` and returns what it returned with the most bytes CubeCL's memory pool had in use
/// (every live allocation on the calling thread's stream: inputs, gradients and temporaries)
/// at the fullest points of the CubeCL paths (the streamed path's chunks, their buffers
/// allocated; the small-classes kernels at C <= 32, each with its outputs allocated), or 0
/// where neither ran. Process-wide while `f` runs: callers in one process must not overlap.
/// The queries cost a server round trip each.
pub fn peak_memory<T>(f: impl FnOnce() -> T) -> (T, u64) {
    #[cfg(feature = "cube")]
    {
        use crate::cube::streamed::peak::{BYTES, RECORD};
        use std::sync::atomic::Ordering;
        BYTES.store(0, Ordering::SeqCst);
        RECORD.store(true, Ordering::SeqCst);
        let out = {
            let _off = OnDrop(|| RECORD.store(false, Ordering::SeqCst));
            f()
        };
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

/// How many forward passes of this process at C <= 32 read bf16 or f16 X natively (CUDA:
/// the small-C kernels on X in its own type; a training step's, or `head_forward` called
/// directly); 0 elsewhere.
pub fn half_small_class_steps() -> u64 {
    #[cfg(feature = "cube")]
    {
        let steps = &crate::cube::streamed::routes::SWITCHES.half_small;
        steps.load(std::sync::atomic::Ordering::SeqCst)
    }
    #[cfg(not(feature = "cube"))]
    {
        0
    }
}

/// Runs `f` with the small-C kernels loading `factor` times the f32 count of X's elements at
/// once where X is bf16 or f16 (the row forward's tile depth, the backward's load group), in
/// place of the crate's factor, for the benchmark's comparison. No bit changes with it (the
/// kernels sum in the same order). Process-wide while `f` runs: callers in one process must
/// not overlap. `factor` must be 1, 2 or 4.
pub fn with_half_loads<T>(factor: u64, f: impl FnOnce() -> T) -> T {
    assert!(
        matches!(factor, 1 | 2 | 4),
        "with_half_loads: 1, 2 or 4, got {factor}"
    );
    #[cfg(feature = "cube")]
    {
        use std::sync::atomic::Ordering;
        let switch = &crate::cube::streamed::routes::SWITCHES.half_loads;
        switch.store(factor, Ordering::SeqCst);
        let _reset = OnDrop(|| switch.store(0, Ordering::SeqCst));
        f()
    }
    #[cfg(not(feature = "cube"))]
    {
        f()
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

/// The rows of each chunk of the streamed path in the lean mode (`HeadAccumulation::Lean`)
/// for a batch of `batch` rows and C = `classes` of bf16 tensors, with the options'
/// `chunk_elements` and `logits`: where its dW is rounded to the inputs' type (after each
/// chunk), for the lean mode's gate. The path's own rule, read, not restated.
pub fn lean_chunk_rows(
    batch: usize,
    classes: usize,
    chunk_elements: Option<usize>,
    logits: crate::HeadLogits,
) -> usize {
    #[cfg(feature = "cube")]
    {
        use crate::cube::streamed::{LEAN_CHUNK_ELEMENTS, LEAN_ROUNDED_CHUNK_ELEMENTS, chunk_rows};
        let budget = match logits {
            crate::HeadLogits::F32 => LEAN_CHUNK_ELEMENTS,
            crate::HeadLogits::Rounded => LEAN_ROUNDED_CHUNK_ELEMENTS,
        };
        chunk_rows(batch, classes, chunk_elements.or(Some(budget)))
    }
    #[cfg(not(feature = "cube"))]
    {
        let _ = (classes, chunk_elements, logits);
        batch
    }
}

/// Runs `f` with the streamed path's dW products (every chunk's, every precision) on
/// cuBLASLt's heuristic answer `index` (0 is the first, the rule before
/// `Pick::WideTile`, TF32 dW's pick since; the last where the heuristic gives fewer; at most
/// 63), for the benchmark's survey of dW's algorithms beside
/// [`gemm_sweep`]. Process-wide while `f` runs. Nothing changes where cuBLASLt does not run.
pub fn with_dw_answer<T>(index: usize, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "cuda")]
    {
        use crate::cube::cublaslt::DW_ANSWER;
        use std::sync::atomic::Ordering;
        DW_ANSWER.store(index, Ordering::SeqCst);
        let _off = OnDrop(|| DW_ANSWER.store(usize::MAX, Ordering::SeqCst));
        f()
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = index;
        f()
    }
}

/// Where the streamed path's host waits at exit, for the benchmark's comparison of the ways
/// (`profile --host-waits K`, K 0 for the path's own rule or one of the flags below; another
/// K panics). Process-wide while `f` runs: callers in one process must not overlap. Nothing
/// changes where the one-timeline route does not run.
pub fn with_host_waits<T>(flags: u32, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "cube")]
    {
        let switches = &crate::cube::streamed::routes::SWITCHES;
        match flags {
            0 => f(),
            HOST_WAITS_EXIT_ON_CALLER => with_switch(&switches.exit_on_caller, f),
            HOST_WAITS_EXIT_ON_SERVER => with_switch(&switches.exit_on_server, f),
            _ => panic!("with_host_waits: 0, 1 or 2, not {flags}"),
        }
    }
    #[cfg(not(feature = "cube"))]
    {
        let _ = flags;
        f()
    }
}

/// [`with_host_waits`]: the streamed path's wait at exit on the calling thread at every size
/// (the route before 2026-12-07, fourth session).
pub const HOST_WAITS_EXIT_ON_CALLER: u32 = 1;
/// [`with_host_waits`]: the streamed path's wait at exit on CubeCL's server thread at every
/// size (lease P's build, 2026-12-07), where the path's rule keeps it there for small steps
/// only.
pub const HOST_WAITS_EXIT_ON_SERVER: u32 = 2;

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

/// `f` run with `switch` on (off again when `f` returns or panics).
#[cfg(feature = "cube")]
fn with_switch<T>(switch: &std::sync::atomic::AtomicBool, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering;
    switch.store(true, Ordering::SeqCst);
    let _off = OnDrop(|| switch.store(false, Ordering::SeqCst));
    f()
}

/// Runs its closure when dropped: a process-wide switch set for `f` is reset even where `f`
/// panics (a test that fails inside it must not leave the next test on another route).
#[cfg(feature = "cube")]
struct OnDrop<F: FnMut()>(F);

#[cfg(feature = "cube")]
impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// One streamed step's cuBLASLt chunks on one GPU timeline, as [`timeline`] traced them: the
/// host's instants, and the stream's work between timed CUDA events recorded after each
/// operation.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// When the step entered the streamed path (its buffers not yet allocated).
    pub called: std::time::Instant,
    /// When the step entered its cuBLASLt chunks (the path's buffers allocated; not yet the
    /// chunk buffer, the engine's lock or the row kernel's lookup).
    pub entered: std::time::Instant,
    /// When the one host wait at entry returned (the chunks' setup done, CubeCL's queue run,
    /// the addresses known).
    pub waited: std::time::Instant,
    /// When every chunk's work was queued on cuBLASLt's stream.
    pub queued: std::time::Instant,
    /// When the one wait at exit returned (the stream has run it all).
    pub synced: std::time::Instant,
    /// When the streamed path returned (the loss reduced, its kernels queued on CubeCL's
    /// stream).
    pub returned: std::time::Instant,
    /// The stream's operations in order: what (`logits`, `rows`, `dX`, `db`, `transpose`,
    /// `dW`) and the milliseconds from the end of the one before (the first, `start`, is 0:
    /// the point after the entry wait). Gaps where the stream waited for the host fall into
    /// the next operation's time.
    pub gpu: Vec<(&'static str, f64)>,
}

/// Runs `f` and returns what it returned with the [`Timeline`] of every streamed step on one
/// GPU timeline in it (none elsewhere: other routes and backends are not traced). The events
/// cost a few microseconds of host time per operation in the step; they are read after `f`
/// returns. Process-wide while `f` runs: callers in one process must not overlap.
pub fn timeline<T>(f: impl FnOnce() -> T) -> (T, Vec<Timeline>) {
    #[cfg(feature = "cuda")]
    {
        use crate::cube::streamed::trace::{CALLED, ON, STEPS};
        use std::sync::atomic::Ordering;
        STEPS.lock().expect("timeline").clear();
        *CALLED.lock().expect("timeline") = None;
        ON.store(true, Ordering::SeqCst);
        let out = {
            let _off = OnDrop(|| ON.store(false, Ordering::SeqCst));
            f()
        };
        let steps = std::mem::take(&mut *STEPS.lock().expect("timeline"));
        let steps = steps
            .into_iter()
            .map(|(mut step, marks)| {
                step.gpu = crate::cube::streamed::trace::resolve(marks);
                step
            })
            .collect();
        (out, steps)
    }
    #[cfg(not(feature = "cuda"))]
    {
        (f(), Vec::new())
    }
}

/// cuBLASLt's heuristic answers for the streamed path's products at one chunk of `rows` rows
/// (I = `inputs`, C = `classes`), up to `count` per product, each timed over `reps` runs on
/// synthetic inputs: one line per answer (see the `gemm_sweep` tool). Empty without CUDA or
/// cuBLASLt.
pub fn gemm_sweep(
    rows: usize,
    inputs: usize,
    classes: usize,
    count: usize,
    reps: usize,
) -> Vec<String> {
    #[cfg(feature = "cuda")]
    {
        crate::cube::cublaslt::sweep::survey(rows, inputs, classes, count, reps)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (rows, inputs, classes, count, reps);
        Vec::new()
    }
}
