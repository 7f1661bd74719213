//! The streamed path for C > 32: the loss and the gradients of a unit upstream gradient in one
//! pass over the batch, chunk of rows by chunk of rows, with no `[B, C]` f32 tensor in memory
//! (bf16's whole-batch mode keeps dZ `[B, C]` in bf16, within the memory of the f32 dW it
//! saves; see below).
//!
//! For each chunk of rows (in order, sized by [`chunk_rows`]):
//! 1. `P = X[rows] W^T` into one chunk buffer `[rows, C]` (with rounded logits in bf16's
//!    whole-batch mode, at the chunk's rows of the `[B, C]` dZ buffer);
//! 2. one cube per row (`kernels::large_classes::streamed::streamed_rows`): `Z = P + b`,
//!    `H = act(Z)`, the row's loss, and `dZ = act'(Z) (softmax(H) - onehot) / B` over P
//!    (with the LM terms of [`Settings::terms`]: H scaled and capped, the z-term's gradient,
//!    each row's log-sum-exp and entropy);
//! 3. `dX[rows] = dZ W`, `dW (+)= dZ^T X[rows]` and `db (+)= column_sum(dZ)`, for the wanted
//!    gradients only; the first chunk writes, the next ones add, in chunk order (bf16's
//!    whole-batch mode: db alone, and dX and dW once after the last chunk).
//!
//! Then the batch mean of the per-row losses. Autodiff scales the gradients by the upstream
//! gradient in its backward step (the loss is a scalar), so nothing `[B, C]` is kept for it.
//! The cost of that choice: a tracked forward pass whose backward never runs (evaluation
//! without `no_grad`) still pays for the gradients, as with Liger's fused loss.
//!
//! The products run on NVIDIA's cuBLASLt on CUDA where it loads ([`cublaslt`]), else on this
//! crate's CubeCL kernels (the tiled exact product, or TF32 tensor cores with `tf32`). The row
//! and column kernels are CubeCL everywhere; on cuBLASLt the row kernel runs on cuBLASLt's
//! stream, compiled outside CubeCL's server (`on_stream`), so a step is one GPU timeline.
//!
//! bf16 inputs run here on cuBLASLt only ([`half_available`]): the
//! products take the inputs' type as operands and accumulate in f32; P (unless rounded), the
//! loss, the softmax, dW and db are f32; the row kernel also writes dZ rounded to the inputs' type (a
//! second chunk buffer, half the size of P), the operand of the dX and dW products. dX comes
//! out of its product in the inputs' type; dW and db are accumulated in f32 and rounded once
//! at the end, as is the loss. Where dW is wanted and `B <= 2 I` ([`whole_batch_dz`]), the
//! rounded dZ is kept for the whole batch (`[B, C]`, each chunk's rows at their place, the
//! chunks at most [`WHOLE_CHUNK_ELEMENTS`]) and dX and dW are one product each after the
//! chunks: dW's f32 accumulation happens inside its one product (K = B), which writes it in
//! the inputs' type, in place of an f32 `[C, I]` read and written by every chunk. In the lean
//! mode ([`Settings::lean`]) dW is of the inputs' type and each chunk's product adds to it
//! (cuBLASLt reads it as C, sums in f32, rounds once), with chunks of at most
//! [`LEAN_CHUNK_ELEMENTS`] and never the whole-batch dZ. With rounded logits
//! ([`Settings::rounded`], bf16 only) the logits product writes P in bf16, the row kernel
//! writes dZ over it in bf16 (no f32 P, no copy) and db sums that dZ; in the whole-batch mode
//! P is written at its rows of the `[B, C]` dZ buffer, in one chunk: no chunk buffer at all.
//!
//! Memory beyond the inputs and the gradients: the chunk buffer (at most [`CHUNK_ELEMENTS`]
//! floats, 256 MiB; [`LARGE_CHUNK_ELEMENTS`], 512 MiB, from C = 65536; one row of C floats
//! where C alone exceeds that), the per-row losses
//! (4 B bytes) and, on cuBLASLt, a vector of ones for db (4 x chunk rows bytes, 2 with
//! rounded logits) and its
//! workspace (32 MiB per device, allocated once); with TF32 there, X's chunk transposed (at
//! most 32 MiB). The CubeCL products also hold one chunk's product output and, for
//! dW, one `[C, I]` partial while it is added. bf16 inputs add the dZ copy (half the chunk
//! buffer's bytes, where dX or dW is wanted) and dW and db in f32 (`4 C (I + 1)` bytes; while
//! they are rounded at the end, their bf16 copies too); in the whole-batch mode, the `[B, C]`
//! dZ copy (`2 B C` bytes, at most the `4 C I` of the f32 dW it replaces) and db in f32.
//! Rounded logits hold a bf16 chunk buffer and no dZ copy, and in the whole-batch mode no
//! chunk buffer at all (P is written into the `[B, C]` dZ).

use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{DType, Slice, TensorMetadata, bf16};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fused_head_kernels::large_classes::streamed as kernels;
use cubecl::server::CubeCountSelection;
use cubecl::{CubeCount, CubeDim};

use super::cubek_tf32::Product;
use super::large_classes::tiled_matmul;
use super::launch::{
    CUBE_UNITS, LIMITS, by_label_type, cast, contiguous, empty, empty_of, mean_of_parts,
    vector_size,
};
use crate::backend::{HeadGradients, HeadWanted};
use crate::options::RowTerms;

/// Elements of the chunk buffer `[rows, C]` at most below [`LARGE_VOCABULARY`] classes.
/// Invariant of memory (the path's bound): 64 Mi floats, 256 MiB. Within it, larger chunks
/// mean fewer passes over dW (each chunk reads and writes the `[C, I]` accumulator once, in
/// f32) and longer dW products (K = the chunk's rows). Tuning (one H200 lease, 2026-12-03,
/// BENCHMARKS.md "Chunk budgets on one timeline"): 48 Mi gave (8192, 4096, 32000) 6 chunks of
/// 1536 rows, 64 Mi gives 4 of 2048: the bf16 step 12.97 -> 12.01 ms, TF32 21.64 -> 21.13.
pub(crate) const CHUNK_ELEMENTS: usize = 64 << 20;
/// From this many classes, chunks of up to [`LARGE_CHUNK_ELEMENTS`]: below it, the rule of
/// [`CHUNK_ELEMENTS`] already gives chunks of at least 1024 rows.
const LARGE_VOCABULARY: usize = 65536;
/// Invariant of memory at C >= [`LARGE_VOCABULARY`]: 128 Mi floats, 512 MiB. Tuning (same
/// lease): at C = 128256, 96 Mi gave 11 chunks of 768 rows, 128 Mi gives 8 of 1024: bf16
/// 53.62 -> 50.78 ms, TF32 96.37 -> 89.29.
const LARGE_CHUNK_ELEMENTS: usize = 128 << 20;

/// A chunk's rows are a multiple of this when it has more: cuBLASLt and the tiled kernels tile
/// rows by 128. Tuning, never swept.
const ROW_MULTIPLE: usize = 128;

/// The peak memory of the streamed path and the small-classes kernels, for the benchmark and
/// the memory tests: built with the `testing` feature only, so that no production build has a
/// process-wide hook.
#[cfg(feature = "testing")]
pub(crate) mod peak {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Whether [`note`] records (see [`crate::testing::peak_memory`]).
    pub(crate) static RECORD: AtomicBool = AtomicBool::new(false);
    /// The most bytes in use that [`note`] saw while recording.
    pub(crate) static BYTES: AtomicU64 = AtomicU64::new(0);

    /// While recording, the bytes CubeCL's pool has in use on `like`'s stream now (every live
    /// allocation: inputs, gradients, this path's buffers), kept if the most so far.
    pub(super) fn note<R: burn_cubecl::CubeRuntime>(like: &burn_cubecl::tensor::CubeTensor<R>) {
        if RECORD.load(Ordering::Relaxed)
            && let Ok(usage) = like.client.memory_usage()
        {
            BYTES.fetch_max(usage.bytes_in_use, Ordering::Relaxed);
        }
    }
}

/// The traced timelines of [`crate::testing::timeline`]: built with the `testing` and `cuda`
/// features only.
#[cfg(all(feature = "testing", feature = "cuda"))]
pub(crate) mod trace {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    /// Whether the one-timeline steps record their marks now.
    pub(crate) static ON: AtomicBool = AtomicBool::new(false);
    /// The steps traced so far: their host instants, and the stream's marks, read once the
    /// traced closure has returned (reading them inside the step would add to its time).
    pub(crate) static STEPS: Mutex<Vec<(crate::testing::Timeline, Marks)>> = Mutex::new(Vec::new());
    /// When the step now running entered the streamed path (its buffers not yet allocated).
    pub(crate) static CALLED: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    /// Whether the step now running pushed its timeline (its [`returned`] is to be noted).
    pub(crate) static PUSHED: AtomicBool = AtomicBool::new(false);

    /// The stream's marks of one step: what each follows, and its event.
    pub(crate) type Marks = Vec<(&'static str, cudarc::driver::CudaEvent)>;

    /// The milliseconds from each mark to the next, each named by the later one (the first,
    /// `start`, 0).
    pub(crate) fn resolve(marks: Marks) -> Vec<(&'static str, f64)> {
        let mut out = Vec::with_capacity(marks.len());
        for (k, (label, event)) in marks.iter().enumerate() {
            let ms = match k {
                0 => 0.0,
                _ => marks[k - 1].1.elapsed_ms(event).expect("event time"),
            };
            out.push((*label, f64::from(ms)));
        }
        out
    }

    /// Notes now as the running step's entry, while tracing.
    pub(crate) fn called() {
        if ON.load(std::sync::atomic::Ordering::Relaxed) {
            *CALLED.lock().expect("timeline") = Some(std::time::Instant::now());
            PUSHED.store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Notes now as the end of the running step, where it pushed its timeline.
    pub(crate) fn returned() {
        if PUSHED.swap(false, std::sync::atomic::Ordering::Relaxed)
            && let Some((last, _)) = STEPS.lock().expect("timeline").last_mut()
        {
            last.returned = std::time::Instant::now();
        }
    }
}

/// Which route the cuBLASLt chunks take, for the tests: built with the `testing` feature only.
#[cfg(feature = "testing")]
pub(crate) mod routes {
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// The process-wide switches and count (see [`crate::testing`]).
    pub(crate) struct Switches {
        /// Forces the host-ordered route ([`crate::testing::host_ordered`]).
        pub host_ordered: AtomicBool,
        /// Forces TF32 dW from X as stored ([`crate::testing::dw_from_x_as_stored`]).
        pub dw_as_stored: AtomicBool,
        /// Forces the wait at exit onto the calling thread ([`crate::testing::with_host_waits`]).
        pub exit_on_caller: AtomicBool,
        /// Forces the wait at exit onto CubeCL's server thread
        /// ([`crate::testing::with_host_waits`]).
        pub exit_on_server: AtomicBool,
        /// Steps that ran on one GPU timeline ([`crate::testing::one_timeline_steps`]).
        pub one_timeline: AtomicU64,
        /// Steps in the whole-batch dZ mode ([`crate::testing::whole_batch_dz_steps`]).
        pub whole_batch: AtomicU64,
        /// Small-C steps on half-precision X read natively
        /// ([`crate::testing::half_small_class_steps`]).
        pub half_small: AtomicU64,
        /// The small-C kernels' load factor for 2-byte X, 0 for the crate's own
        /// ([`crate::testing::with_half_loads`]).
        pub half_loads: AtomicU64,
    }

    pub(crate) static SWITCHES: Switches = Switches {
        host_ordered: AtomicBool::new(false),
        dw_as_stored: AtomicBool::new(false),
        exit_on_caller: AtomicBool::new(false),
        exit_on_server: AtomicBool::new(false),
        one_timeline: AtomicU64::new(0),
        whole_batch: AtomicU64::new(0),
        half_small: AtomicU64::new(0),
        half_loads: AtomicU64::new(0),
    };
}

/// Where the path holds the most (each chunk with its buffers allocated; on the small-classes
/// path, each kernel's outputs allocated): the peak memory's measure with the `testing`
/// feature, nothing without.
pub(super) fn note_memory<R: CubeRuntime>(like: &CubeTensor<R>) {
    #[cfg(feature = "testing")]
    peak::note(like);
    #[cfg(not(feature = "testing"))]
    let _ = like;
}

/// Invariant of memory in the whole-batch dZ mode ([`whole_batch_dz`]): 52 Mi floats, 208
/// MiB of chunk buffer, so that with the 32 MiB cuBLASLt workspace they take 240 MiB, and the
/// mode stays within issue 30's bound for f32 accumulation (`4 C I` bytes + 256 MiB: its
/// `[B, C]` bf16 dZ is at most `4 C I` bytes where `B <= 2 I`), with 16 MiB left for the
/// per-row and per-class vectors (`4 B` to `16 B` and `4 C` bytes, and a vector of ones).
pub(crate) const WHOLE_CHUNK_ELEMENTS: usize = 52 << 20;

/// Invariant of memory in the lean mode with rounded logits ([`Settings::rounded`]): 96 Mi
/// elements, as many bytes as [`LEAN_CHUNK_ELEMENTS`] with f32 P (the chunk buffer holds P
/// and dZ over it in bf16, 2 bytes an element, where f32 P and dZ's copy take 6): 192 MiB.
/// (8192, 4096, 32000): 3 chunks of at most 3072 rows; 128256: 11 of at most 768.
pub(crate) const LEAN_ROUNDED_CHUNK_ELEMENTS: usize = 96 << 20;

/// Invariant of memory in the lean mode ([`HeadAccumulation::Lean`]): 32 Mi elements, so that
/// the chunk buffers take at most 192 MiB in bf16 (P in f32 and dZ's copy, 6 bytes an element;
/// 128 MiB in f32, plus at most 32 MiB of X's transposed chunk with TF32) and, with the 32 MiB
/// cuBLASLt workspace, 224 MiB: 32 MiB under the mode's 256 for the per-row and per-class
/// vectors. (8192, 4096, 32000): 8 chunks of 1024 rows; 128256: 32 of 256.
///
/// [`HeadAccumulation::Lean`]: crate::HeadAccumulation::Lean
pub(crate) const LEAN_CHUNK_ELEMENTS: usize = 32 << 20;

/// Whether a step keeps dZ for the whole batch, in the inputs' half type, and runs dX and dW
/// as one product each after the chunks (K = the batch for dW, accumulated in f32 inside the
/// product and written once in the inputs' type), where per-chunk products would add every
/// chunk's dW into an f32 accumulator through memory. Half inputs with dW wanted whose `[B, C]`
/// dZ copy takes no more than that accumulator would (`2 B C <= 4 C I`, i.e. `B <= 2 I`) and
/// is one tensor the kernels address (at most `u32::MAX` elements, [`LIMITS`]; else the
/// chunks' products, which need no `[B, C]` tensor).
pub(crate) fn whole_batch_dz(
    half: bool,
    weight_wanted: bool,
    [batch, inputs, classes]: [usize; 3],
) -> bool {
    half && weight_wanted
        && batch <= 2 * inputs
        && batch.saturating_mul(classes) <= LIMITS.max_elements
}

/// Rows per chunk for a batch of `batch` rows and C = `classes`, with at most
/// `chunk_elements` elements per chunk where given (else the path's rule): a rule of the shape
/// and the options alone, so the same inputs give the same bits on every call.
pub(crate) fn chunk_rows(batch: usize, classes: usize, chunk_elements: Option<usize>) -> usize {
    let budget = match chunk_elements {
        None if classes >= LARGE_VOCABULARY => LARGE_CHUNK_ELEMENTS,
        None => CHUNK_ELEMENTS,
        Some(n) => n.max(1),
    };
    let fit = (budget / classes.max(1)).max(1);
    let rows = if fit >= ROW_MULTIPLE {
        fit / ROW_MULTIPLE * ROW_MULTIPLE
    } else {
        fit
    };
    rows.min(batch).max(1)
}

/// How one call of the path computes: the product precision, the activation, the chunk
/// budget, the LM terms.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    /// TF32 tensor cores for the products (f32 inputs on a device that has them).
    pub tf32: bool,
    /// ReLU (true) or the identity on the logits.
    pub relu: bool,
    /// See [`chunk_rows`].
    pub chunk_elements: Option<usize>,
    /// [`crate::HeadAccumulation::Lean`]: dW summed in the inputs' type between chunks,
    /// chunks of at most [`LEAN_CHUNK_ELEMENTS`] ([`LEAN_ROUNDED_CHUNK_ELEMENTS`] with
    /// `rounded`) unless `chunk_elements` says.
    pub lean: bool,
    /// [`crate::HeadLogits::Rounded`]: for bf16 inputs, P is written in bf16 and dZ over it
    /// (no f32 P, no dZ copy); nothing for f32 inputs.
    pub rounded: bool,
    /// The logit scale, softcap and z-loss, and whether to give the statistics (its
    /// activation and smoothing are not read: the activation is `relu`'s, smoothing never
    /// streams).
    pub terms: RowTerms,
}

/// The loss `[1]` (or the per-row losses `[B]`), the gradients, (where asked for) the
/// predictions `[B]`, and (with row weights and a z-loss, or with the statistics asked for)
/// [`RowStats`] of one call.
pub(super) type LossAndGradients<R, F, I, BT> = (
    CubeTensor<R>,
    HeadGradients<CubeBackend<R, F, I, BT>>,
    Option<CubeTensor<R>>,
    Option<RowStats<R>>,
);

/// Each row's statistics from the row kernel, `[B]` each, f32: `[lse, entropy, loss]`, the
/// loss the row's as the kernel wrote it (the cross-entropy's alone with row weights; without,
/// `ce + zeta lse^2`, the z-term in it).
pub(super) type RowStats<R> = [CubeTensor<R>; 3];

/// Whether half-precision inputs like `x` run on this path: on CUDA where cuBLASLt loads.
pub(super) fn half_available<R: CubeRuntime>(x: &CubeTensor<R>) -> bool {
    #[cfg(feature = "cuda")]
    {
        cuda::available(x)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = x;
        false
    }
}

/// The loss `[1]` and the wanted gradients for a unit upstream gradient, chunk by chunk, and
/// with `predict` the predicted class of each row (`[B]`, the labels' dtype). With
/// `row_weights` (`[B]`, f32), the gradients of `sum_r row_weights[r] loss[r]` and, in
/// place of the mean, the per-row losses `[B]` in f32, unweighted. X, W, b and the
/// labels are checked by the caller; B > 0 and I > 0. The float inputs are f32 (then `F` is
/// f32), or bf16 where [`half_available`] says so.
///
/// With the LM terms of `settings.terms`: the loss rows are the cross-entropy's of the scaled
/// and capped logits. With row weights, the z-term's gradient joins with each row's
/// `z_weights[r]` (`[B]`, f32), and the statistics ([`RowStats`]) come back for the caller to
/// add `zeta lse^2` and to give them. Without, the z-term weighs `1 / B` and is in each row's
/// loss and in the mean (`z_weights` unread), and the statistics come back where
/// `terms.token_stats` asks for them.
pub(super) fn loss_and_gradients<
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    op: &str,
    [x, weight, bias, labels]: [CubeTensor<R>; 4],
    wanted: HeadWanted,
    settings: Settings,
    predict: bool,
    row_weights: Option<CubeTensor<R>>,
    z_weights: Option<CubeTensor<R>>,
) -> LossAndGradients<R, F, I, BT> {
    #[cfg(all(feature = "testing", feature = "cuda"))]
    trace::called();
    let Settings {
        tf32,
        relu,
        chunk_elements,
        lean,
        rounded,
        terms,
    } = settings;
    let (x, weight, bias, labels) = (
        contiguous(x),
        contiguous(weight),
        contiguous(bias),
        contiguous(labels),
    );
    let [batch, inputs] = [x.shape()[0], x.shape()[1]];
    let classes = weight.shape()[0];
    let dtype = x.dtype;
    let half = dtype != DType::F32;
    let rounded = rounded && dtype == DType::BF16;
    let whole = !lean && whole_batch_dz(half, wanted.weight, [batch, inputs, classes]);
    let budget = chunk_elements.or(match (lean, whole, rounded) {
        (true, _, false) => Some(LEAN_CHUNK_ELEMENTS),
        (true, _, true) => Some(LEAN_ROUNDED_CHUNK_ELEMENTS),
        // P is written into the whole batch's dZ: no chunk buffer, one chunk.
        (false, true, true) => Some(usize::MAX),
        (false, true, false) => Some(WHOLE_CHUNK_ELEMENTS),
        (false, false, _) => None,
    });
    let rows = chunk_rows(batch, classes, budget);
    let sums = DType::F32;
    let loss_rows = empty_of::<R>(&x, [batch], sums); // [B]
    // [B] of the labels' dtype, or one element the row kernel never writes.
    let predictions = empty::<R>(&labels, [if predict { batch } else { 1 }]);
    // dZ in the inputs' type for the dX and dW products (bf16 inputs, where either is
    // wanted): [rows, C], or [B, C] in the whole-batch mode; else one vector of the row
    // kernel's width (a binding of its vector type) that it never writes. With rounded
    // logits, P itself is that dZ (the row kernel writes no copy), and the whole-batch
    // buffer is where the logits product writes P.
    let copy = half && (wanted.x || wanted.weight) && !rounded;
    let dz_half = empty::<R>(
        &x,
        [if whole {
            batch * classes
        } else if copy {
            rows * classes
        } else {
            row_vector(classes)
        }],
    );
    // dW [C, I]: accumulated in f32 chunk by chunk; in the whole-batch mode, written once by
    // its product in the inputs' type; in the lean mode, accumulated in the inputs' type.
    let dw_type = if whole || lean { dtype } else { sums };
    let mut grads = Grads {
        x: wanted.x.then(|| empty::<R>(&x, [batch, inputs])), // [B, I]
        weight: wanted
            .weight
            .then(|| empty_of::<R>(&x, [classes, inputs], dw_type)), // [C, I]
        bias: wanted.bias.then(|| empty_of::<R>(&x, [classes], sums)), // [C]
    };
    // The rows' weights [B] (f32), or one element the row kernel never reads.
    let weighted = row_weights.is_some();
    let row_weights = match row_weights {
        Some(w) => contiguous(w),
        None => empty_of::<R>(&x, [1], sums),
    };
    let z_loss = terms.z_loss != 0.0;
    assert!(
        !z_loss || !weighted || z_weights.is_some(),
        "the streamed z-loss with row weights needs z-weights"
    );
    let z_weights = match z_weights {
        Some(w) if z_loss && weighted => contiguous(w),
        _ => empty_of::<R>(&x, [1], sums),
    };
    // Each row's log-sum-exp and entropy [B] (f32), or one element each never written.
    // Unweighted, the z-term is in the row's loss and needs none: only the statistics asked
    // for.
    let stats = if weighted {
        terms.wants_stats()
    } else {
        terms.token_stats
    };
    let [lse, entropy] = [(); 2].map(|_| empty_of::<R>(&x, [if stats { batch } else { 1 }], sums));
    let launch_rows = match (dtype, rounded) {
        (DType::BF16, true) => by_label_type!(op, labels.dtype, launch_chunk_rows::<R, bf16, bf16>),
        (DType::BF16, false) => by_label_type!(op, labels.dtype, launch_chunk_rows::<R, bf16, f32>),
        _ => by_label_type!(op, labels.dtype, launch_chunk_rows::<R, f32, f32>),
    };
    let chunk = Chunk {
        x: &x,
        weight: &weight,
        bias: &bias,
        labels: &labels,
        loss_rows: &loss_rows,
        predictions: &predictions,
        predict,
        dz_half: &dz_half,
        half: copy,
        whole,
        lean,
        rounded,
        row_weights: &row_weights,
        weighted,
        z_weights: &z_weights,
        stats,
        lse: &lse,
        entropy: &entropy,
        terms,
        launch_rows,
        batch,
        tf32,
        relu,
    };

    #[cfg(feature = "cuda")]
    let done = cuda::run::<R>(&chunk, rows, &mut grads);
    #[cfg(not(feature = "cuda"))]
    let done = false;
    assert!(
        done || !half,
        "half-precision inputs on the streamed path without cuBLASLt"
    );
    if !done {
        for first in (0..batch).step_by(rows) {
            chunk.on_cubecl::<F, I, BT>(first, rows.min(batch - first), &mut grads);
        }
    }
    // f32 sums rounded once to the inputs' type (nothing done for f32 inputs); weighted, the
    // caller reduces the f32 rows.
    let rows_kept = stats.then(|| loss_rows.clone());
    let loss = if weighted {
        loss_rows
    } else {
        cast(mean_of_parts::<R, f32>(loss_rows, batch), dtype)
    };
    #[cfg(all(feature = "testing", feature = "cuda"))]
    trace::returned();
    (
        loss,
        HeadGradients {
            x: grads.x,
            weight: grads.weight.map(|t| cast(t, dtype)),
            bias: grads.bias.map(|t| cast(t, dtype)),
        },
        predict.then_some(predictions),
        rows_kept.map(|rows| [lse, entropy, rows]),
    )
}

/// The gradients being built, `None` where not wanted.
struct Grads<R: CubeRuntime> {
    x: Option<CubeTensor<R>>,
    weight: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
}

/// What every chunk reads: the contiguous inputs, the per-row losses it writes, and the row
/// kernel's launch for the labels' type.
struct Chunk<'a, R: CubeRuntime> {
    x: &'a CubeTensor<R>,
    weight: &'a CubeTensor<R>,
    bias: &'a CubeTensor<R>,
    labels: &'a CubeTensor<R>,
    loss_rows: &'a CubeTensor<R>,
    /// `[B]` of the labels' dtype where `predict`, else one element never written.
    predictions: &'a CubeTensor<R>,
    predict: bool,
    /// With `half`, a chunk's dZ rounded to the inputs' type (`[rows, C]` elements; `[B, C]`
    /// in the whole-batch mode, each chunk's rows at their place), else one vector never
    /// written; with `rounded` in the whole-batch mode, `[B, C]`, where each chunk's P is
    /// written and dZ over it (`half` is false there).
    dz_half: &'a CubeTensor<R>,
    /// bf16 inputs with dX or dW wanted, logits not rounded: the row kernel also writes
    /// `dz_half`, the operand of those products. (The sums are f32 for bf16 inputs either way,
    /// and so is P unless `rounded`.)
    half: bool,
    /// The whole-batch dZ mode ([`whole_batch_dz`]): `dz_half` holds `[B, C]`, each chunk's
    /// rows at their place, and dX and dW are one product each after the chunks.
    whole: bool,
    /// The lean mode: dW `[C, I]` is of the inputs' type, each chunk's product adding to it.
    /// Read by the cuBLASLt products only: elsewhere the lean mode is its chunk size alone.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    lean: bool,
    /// Rounded logits (bf16 inputs, [`Settings::rounded`]): P is of the inputs' type and the
    /// row kernel writes dZ over it, the operand of every gradient's product (db too); in the
    /// whole-batch mode P is written at the chunk's rows of `dz_half`. Only on cuBLASLt
    /// (bf16 runs nowhere else here).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    rounded: bool,
    /// With `weighted`, each row's dZ scale `[B]` (f32), else one element never read.
    row_weights: &'a CubeTensor<R>,
    weighted: bool,
    /// With a z-loss and `weighted`, each row's z-term weight `[B]` (f32), else one element
    /// never read.
    z_weights: &'a CubeTensor<R>,
    /// With `weighted` and [`RowTerms::wants_stats`], or with the statistics asked for: the
    /// row kernel writes each row's log-sum-exp and entropy.
    stats: bool,
    /// With `stats`, each row's log-sum-exp and entropy `[B]` (f32), else one element each
    /// never written.
    lse: &'a CubeTensor<R>,
    entropy: &'a CubeTensor<R>,
    /// The LM terms (see [`Settings::terms`]).
    terms: RowTerms,
    launch_rows: RowsLaunch<R>,
    batch: usize,
    tf32: bool,
    /// ReLU (true) or the identity on the logits.
    relu: bool,
}

/// The row kernel's host launch for one label type.
type RowsLaunch<R> = fn(&CubeTensor<R>, &Chunk<'_, R>, usize);

impl<R: CubeRuntime> Chunk<'_, R> {
    /// The row kernel on the chunk's product `p` (rows `first..`), then db's column sums.
    fn rows_and_bias<F: FloatElement>(
        &self,
        p: &CubeTensor<R>,
        first: usize,
        db: Option<&CubeTensor<R>>,
    ) {
        (self.launch_rows)(p, self, first);
        if let Some(db) = db {
            column_sums::<R, F>(p, db, first > 0);
        }
    }

    /// One chunk of `n` rows from `first`, its products on the CubeCL kernels.
    fn on_cubecl<F: FloatElement, I: IntElement, BT: BoolElement>(
        &self,
        first: usize,
        n: usize,
        grads: &mut Grads<R>,
    ) {
        type Backend<R, F, I, BT> = CubeBackend<R, F, I, BT>;
        let [inputs, classes] = [self.x.shape()[1], self.weight.shape()[0]];
        let x_rows = contiguous(burn_cubecl::kernel::slice(
            self.x.clone(),
            &[first..first + n, 0..inputs],
        )); // [n, I]
        // P [n, C] = X[rows] W^T: A = X[rows] stored [n, I], B = W stored [C, I], K contiguous.
        let p = tiled_matmul::<R, F>(
            &x_rows,
            self.weight,
            [n, classes],
            [true, true],
            self.tf32,
            Product::Logits,
        );
        self.rows_and_bias::<F>(&p, first, grads.bias.as_ref());
        if let Some(dx) = grads.x.take() {
            // dX[rows] [n, I] = dZ W: A = dZ stored [n, C]; B = W stored [C, I].
            let part = tiled_matmul::<R, F>(
                &p,
                self.weight,
                [n, inputs],
                [true, false],
                self.tf32,
                Product::InputGradient,
            );
            let slices = [Slice::from(first..first + n), Slice::from(0..inputs)];
            grads.x = Some(Backend::<R, F, I, BT>::float_slice_assign(
                dx, &slices, part,
            ));
        }
        if let Some(dw) = grads.weight.take() {
            // dW [C, I] (+)= dZ^T X[rows]: A = dZ^T read from dZ stored [n, C]; B = X[rows].
            let part = tiled_matmul::<R, F>(
                &p,
                &x_rows,
                [classes, inputs],
                [false, false],
                self.tf32,
                Product::WeightGradient,
            );
            if first == 0 {
                grads.weight = Some(part);
            } else {
                note_memory(&part); // the partial and dW both alive
                grads.weight = Some(Backend::<R, F, I, BT>::float_add(dw, part));
            }
        }
        note_memory(&p);
    }
}

/// [`Chunk::rows_and_bias`]'s row kernel for inputs of type `E`, P stored as `P` (f32, or `E`
/// with rounded logits) and labels of type `L`.
fn launch_chunk_rows<R: CubeRuntime, E: FloatElement, P: FloatElement, L: IntElement>(
    p: &CubeTensor<R>,
    chunk: &Chunk<'_, R>,
    first: usize,
) {
    let count = cube_count(p, p.shape()[0]);
    let max_units = p.client.properties().hardware.max_units_per_cube;
    let units = row_units(max_units, p.shape()[1]);
    // SAFETY: the kernel guards every access by P's shape; P [n, C] (made by this path), b and
    // the labels are contiguous; the vector width divides C and P, b and dz_half start on a
    // whole vector (`row_vector`); rows first..first + n of the labels and the losses exist;
    // with `half`, dz_half (or its view at the chunk's rows) holds n x C elements; with `weighted`, the row weights are [B] f32
    // (checked by the caller) and contiguous; with a z-loss and `weighted` so are the
    // z-weights; with the statistics, lse and entropy are [B].
    let terms = chunk.terms;
    let dz_half = chunk.dz_half_rows(first, p.shape()[0]);
    unsafe {
        kernels::streamed_rows::launch_unchecked::<f32, E, P, L, R>(
            &p.client,
            count,
            CubeDim::new_1d(units),
            row_vector(p.shape()[1]),
            p.clone().into_tensor_arg(),
            chunk.bias.clone().into_tensor_arg(),
            chunk.labels.clone().into_tensor_arg(),
            chunk.loss_rows.clone().into_tensor_arg(),
            chunk.predictions.clone().into_tensor_arg(),
            dz_half.into_tensor_arg(),
            chunk.row_weights.clone().into_tensor_arg(),
            chunk.z_weights.clone().into_tensor_arg(),
            chunk.lse.clone().into_tensor_arg(),
            chunk.entropy.clone().into_tensor_arg(),
            first,
            chunk.batch,
            f32::NAN,
            terms.logit_scale,
            terms.softcap.unwrap_or(1.0),
            terms.z_loss,
            units as usize,
            chunk.relu,
            chunk.predict,
            chunk.half,
            chunk.weighted,
            terms.softcap.is_some(),
            terms.z_loss != 0.0,
            chunk.stats,
        );
    }
}

impl<R: CubeRuntime> Chunk<'_, R> {
    /// The row kernel's `dz_half` for rows `first..first + n`: in the whole-batch mode, those
    /// rows of dZ's `[B, C]` copy as a view of its buffer (no copy); else `dz_half` itself.
    fn dz_half_rows(&self, first: usize, n: usize) -> CubeTensor<R> {
        if !self.whole {
            return self.dz_half.clone();
        }
        let classes = self.weight.shape()[0];
        self.whole_rows(first, [n * classes])
    }

    /// Rows `first..` of the whole-batch `[B, C]` buffer (`dz_half`) as a tensor of `shape`
    /// on the same memory (no copy).
    fn whole_rows<const D: usize>(&self, first: usize, shape: [usize; D]) -> CubeTensor<R> {
        let t = self.dz_half;
        let classes = self.weight.shape()[0];
        let offset = (first * classes * t.dtype.size()) as u64;
        CubeTensor::new_contiguous(
            t.client.clone(),
            t.device.clone(),
            shape.into(),
            t.handle.clone().offset_start(offset),
            t.dtype,
        )
    }
}

/// Units per cube of the row kernel for rows of `classes`: 256, or 1024 from C = 65536 where
/// the device allows it (CUDA does, WebGPU's default limit does not), so that a chunk of a few
/// hundred long rows still has enough loads in flight to keep DRAM busy.
pub(super) fn row_units(max_units: u32, classes: usize) -> u32 {
    if classes >= LARGE_VOCABULARY && max_units >= LONG_ROW_UNITS {
        LONG_ROW_UNITS
    } else {
        CUBE_UNITS
    }
}

/// See [`row_units`]: CUDA's largest block.
const LONG_ROW_UNITS: u32 = 1024;

/// The row kernel's vector width for rows of `classes`: 4 where it divides C (P, the bias and
/// the bf16 copy of dZ are read and written 4 elements at a time), else 2 or 1. Every row then
/// starts on a whole vector: P and the bias start a CubeCL allocation (or an aligned view of
/// one), and the whole-batch mode's view of dZ starts at a row, `first C` elements in.
pub(super) fn row_vector(classes: usize) -> usize {
    vector_size(classes, 4)
}

/// `db = column_sum(dZ)`, or `db += ..` with `accumulate`; one cube per class.
fn column_sums<R: CubeRuntime, F: FloatElement>(
    dz: &CubeTensor<R>,
    db: &CubeTensor<R>,
    accumulate: bool,
) {
    let count = cube_count(dz, dz.shape()[1]);
    // SAFETY: the kernel guards every access by dZ's shape; dZ is contiguous, db is [C].
    unsafe {
        kernels::streamed_column_sums::launch_unchecked::<F, R>(
            &dz.client,
            count,
            CubeDim::new_1d(CUBE_UNITS),
            dz.clone().into_tensor_arg(),
            db.clone().into_tensor_arg(),
            accumulate,
            CUBE_UNITS as usize,
        );
    }
}

/// `n` cubes, spread over the axes the hardware allows.
fn cube_count<R: CubeRuntime>(like: &CubeTensor<R>, n: usize) -> CubeCount {
    CubeCountSelection::new(&like.client, n as u32).cube_count()
}

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod on_stream;

#[cfg(test)]
mod tests {
    use super::*;

    /// The lean mode's chunks at issue 30's shapes, and what they hold on cuBLASLt beyond the
    /// inputs and gradients in bf16: P (f32) and dZ's copy (bf16) per element, the per-row
    /// losses, the ones, db in f32 and in bf16, the 32 MiB workspace: under 256 MiB.
    #[test]
    fn lean_chunks_hold_under_256_mib_in_bf16() {
        const MIB: usize = 1 << 20;
        for (batch, inputs, classes, rows, whole) in [
            (8192, 4096, 32000, 1024, true),
            (8192, 4096, 128256, 256, true),
            (8192, 1024, 1000, 8192, false),
        ] {
            let got = chunk_rows(batch, classes, Some(LEAN_CHUNK_ELEMENTS));
            assert_eq!(got, rows, "B={batch} C={classes}");
            let chunk = got * classes * (4 + 2);
            let vectors = 4 * batch + 4 * got + (4 + 2) * classes;
            let held = chunk + vectors + 32 * MIB;
            assert!(
                held < 256 * MIB,
                "B={batch} I={inputs} C={classes}: {held} bytes"
            );
            // The default in bf16 at issue 30's shapes (B <= 2 I): the whole batch's dZ, larger.
            assert_eq!(whole_batch_dz(true, true, [batch, inputs, classes]), whole);
        }
    }
}
