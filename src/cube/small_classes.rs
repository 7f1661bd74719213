//! The fast path for C <= 32 (`kernels::small_classes`): memory-bound, one pass over X
//! forward and one backward, the C values of a row in registers.
//!
//! Geometry is a rule of (B, I, C) only, never of the device, so the same inputs give the same
//! bits on every GPU. The three rules, each a struct made by `new` from (B, I, C), and
//! [`RowForward`]'s and [`BackwardGeometry`]'s from X's element size too (2-byte X loads more
//! at once):
//! - [`RowForward`]: the forward and logits from [`ROW_FORWARD_FROM`] rows on, one unit per row;
//! - [`PlaneForward`]: below, one plane per group of rows;
//! - [`BackwardGeometry`]: the backward's vector width, load groups, units and row chunks.

use burn::tensor::TensorMetadata;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fused_head_kernels::small_classes as kernels;
use cubecl::{CubeCount, CubeDim};

use super::launch::{
    CUBE_UNITS, by_label_type, contiguous, empty, mean_of_parts, partial_sum, partial_sum_pair,
    vector_size,
};
use burn::tensor::{DType, Tensor, bf16, f16};

use super::half::{Full, up};
use super::launch::cast;
use super::streamed::note_memory;
use crate::backend::{HeadGradients, HeadWanted, KernelOptions, RowTerms, predictions_of};

/// From this batch size on, the forward and logits run one unit per row ([`RowForward`]);
/// below, one plane per group of rows ([`PlaneForward`]). Tuning: measured on the H200 at
/// I = 1024 (2026-11-30), the row layout's training step back to back was 0.95x the planes'
/// at (16384, 1024, 10), 0.85x at (65536, 1024, 10), 0.84x and 0.81x at C = 32, but 1.08x at
/// (8192, 1024, 10), where one unit per row leaves 2 warps per SM.
const ROW_FORWARD_FROM: usize = 16384;

/// Vectors of each row per shared-memory tile of the row layout. Tuning: 8 vectors of 4 (32
/// floats, 128 bytes per row and tile); depths 4 and 16 were slower at (65536, 1024, 10) on
/// the H200 (2026-11-30).
const ROW_TILE_DEPTH: usize = 8;

/// How many times the f32 count of X's elements a unit loads at once where X has 2 bytes an
/// element (bf16, f16 read natively): the row forward's tile depth and the backward's load
/// group, so that each unit keeps as many bytes of X in flight as with f32 X. The kernels sum
/// in the same order whatever the depth and the group (column order, row order), so it
/// changes no bit. Tuning: see [`half_loads`].
const HALF_LOADS: usize = 2;

/// [`HALF_LOADS`] for X of `x_bytes` bytes an element (1 for f32 X); with the `testing`
/// feature, the factor `crate::testing::with_half_loads` sets in its place.
fn half_loads(x_bytes: usize) -> usize {
    if x_bytes >= 4 {
        return 1;
    }
    #[cfg(feature = "testing")]
    {
        let set = super::streamed::routes::SWITCHES
            .half_loads
            .load(std::sync::atomic::Ordering::SeqCst);
        if set > 0 {
            return set as usize;
        }
    }
    HALF_LOADS
}

/// Up to this many 256-unit cubes' worth of rows, the plane forward runs as one cube of 512
/// units that also writes the mean (each plane then walks at most 2 groups of rows): one
/// launch fewer at small B. Tuning, with `MAX_PLANES` in the kernel as its invariant.
const ONE_CUBE_UP_TO: usize = 4;

/// Rows per chunk of the backward: at least this many, so that the partial sums of dW stay
/// small next to X. Tuning, not swept (with [`MAX_CHUNKS`]); the chunking depends on B only,
/// so the same inputs give the same bits on every GPU.
const MIN_CHUNK_ROWS: usize = 64;
/// At most this many chunks (cubes along the batch) in the backward. Tuning, not swept: 512
/// chunks keep every SM of a large GPU busy at B = 65536 (with 1 to 4 column tiles) while the
/// partial sums of dW stay at 21 MB there (C = 10, I = 1024).
const MAX_CHUNKS: usize = 512;
/// Rows of dZ staged in shared memory at a time by the backward. Invariant: 128 x 32 floats is
/// 16 KiB of shared memory at C = 32. Tuning: one stage per chunk up to B = 65536; against
/// 32-row stages on the H200 (2026-11-30), the step back to back 0.312 against 0.315 ms at
/// (65536, 1024, 10), 1.072 against 1.092 ms at (65536, 1024, 32).
const STAGE_ROWS: usize = 128;

/// The row layout of the forward and logits (`forward_rows`, `logits_rows`): one unit per row,
/// X staged through shared memory in tiles of [`ROW_TILE_DEPTH`] vectors.
struct RowForward {
    /// Rows per cube (one unit each). Tuning: 128 up to C = 16, 32 above (the fastest of 32,
    /// 64 and 128 on the H200, 2026-11-30: 128 at C = 10, 32 at C = 32). It changes only the
    /// order of the loss sum, never Z, H or dH.
    rows: usize,
    /// Vector width of the X and W loads (4, 2 or 1, dividing I).
    vector: usize,
    /// Vectors of each row per tile: [`ROW_TILE_DEPTH`], times [`half_loads`] for 2-byte X.
    depth: usize,
    cubes: usize,
}

impl RowForward {
    /// `None` below [`ROW_FORWARD_FROM`] rows, and for more cubes than one launch dimension
    /// holds on every runtime (65535; the plane layout strides over any B).
    /// X of `x_bytes` bytes an element.
    fn new(batch: usize, inputs: usize, classes: usize, x_bytes: usize) -> Option<Self> {
        let rows = if classes <= 16 { 128 } else { 32 };
        let cubes = batch.div_ceil(rows);
        (batch >= ROW_FORWARD_FROM && cubes <= u16::MAX as usize).then(|| Self {
            rows,
            vector: vector_size(inputs, 4),
            depth: ROW_TILE_DEPTH * half_loads(x_bytes),
            cubes,
        })
    }
}

/// The plane layout of the forward and logits (`forward_planes`, `logits_planes`).
struct PlaneForward {
    /// Rows per plane: 2 up to C = 16, else 1. Tuning, measured at (65536, 1024, 10) on the
    /// H200 (2026-11-29): 2 rows (64 registers, 47% occupancy) 167 us, 4 rows (128 registers,
    /// 24%) 211 us; each W load serves all the rows, so 1 row is not better either.
    rows: usize,
    /// Vector width of the X and W loads (4, 2 or 1, dividing I).
    vector: usize,
    /// Segments of each row loaded per pass: about 8 elements of X in flight per lane. Tuning:
    /// more, at 2 rows, measured slower (179 us against 167 us).
    steps: usize,
    /// Cubes of the forward: the 256-unit cubes the rows need, or 1 with `mean`.
    cubes: usize,
    /// One cube that writes the mean itself (see [`ONE_CUBE_UP_TO`]).
    mean: bool,
}

impl PlaneForward {
    fn new(batch: usize, inputs: usize, classes: usize) -> Self {
        let rows = if classes <= 16 { 2 } else { 1 };
        let vector = vector_size(inputs, 4);
        let needed = Self::plane_cubes(batch, rows);
        let mean = needed <= ONE_CUBE_UP_TO;
        Self {
            rows,
            vector,
            steps: (8 / (rows * vector)).max(1),
            cubes: if mean { 1 } else { needed },
            mean,
        }
    }

    /// 256-unit cubes for one group of `rows` rows per plane: with 32-unit planes, 8 planes per
    /// cube (smaller planes only add planes). Planes stride over the groups of rows, so the
    /// count, capped at one launch dimension, covers any B.
    fn plane_cubes(batch: usize, rows: usize) -> usize {
        batch.div_ceil(rows * 8).min(u16::MAX as usize)
    }

    /// Units per cube: 256, or 512 for the one-cube launch (twice the planes on a batch that
    /// one cube walks alone).
    fn units(&self) -> u32 {
        if self.mean {
            2 * CUBE_UNITS
        } else {
            CUBE_UNITS
        }
    }
}

/// The forward: `(loss [1], Z [B, C], dH [B, C])` for contiguous-able X, W, b and labels.
/// X is of type `E` (`F`, or bf16 and f16 read natively, [`half_native`]); the rest and the
/// outputs of `F`.
pub(super) fn forward<R: CubeRuntime, F: FloatElement, E: FloatElement>(
    op: &str,
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    labels: CubeTensor<R>,
    relu: bool,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let (batch, inputs, classes) = (x.shape()[0], x.shape()[1], weight.shape()[0]);
    let (x, weight, bias, labels) = (
        contiguous(x),
        contiguous(weight),
        contiguous(bias),
        contiguous(labels),
    );
    let z = empty::<R>(&weight, [batch, classes]); // [B, C]
    let dh = empty::<R>(&weight, [batch, classes]); // [B, C]
    if batch == 0 {
        // No rows: the mean over nothing is 0 / 0 = NaN, as stage 2 and the mean give.
        let none = empty::<R>(&weight, [0]);
        return (mean_of_parts::<R, F>(none, 0), z, dh);
    }
    let inputs4 = [&x, &weight, &bias, &labels];
    if let Some(rows) = RowForward::new(batch, inputs, classes, size_of::<E>()) {
        let loss = empty::<R>(&weight, [rows.cubes]); // the loss sums per cube
        note_memory(&loss);
        let launch = by_label_type!(op, labels.dtype, launch_forward_rows::<R, F, E>);
        launch(inputs4, [&z, &dh, &loss], classes, &rows, relu);
        return (mean_of_parts::<R, F>(loss, batch), z, dh);
    }
    let planes = PlaneForward::new(batch, inputs, classes);
    // The loss sums per cube [cubes], or with one cube the mean itself [1].
    let loss = empty::<R>(&weight, [planes.cubes]);
    note_memory(&loss);
    let launch = by_label_type!(op, labels.dtype, launch_forward_planes::<R, F, E>);
    launch(inputs4, [&z, &dh, &loss], classes, &planes, relu);
    let loss = if planes.mean {
        loss
    } else {
        mean_of_parts::<R, F>(loss, batch)
    };
    (loss, z, dh)
}

/// `forward_rows` for labels of type `L`: inputs X, W, b, labels; outputs Z, dH, loss.
fn launch_forward_rows<R: CubeRuntime, F: FloatElement, E: FloatElement, L: IntElement>(
    [x, weight, bias, labels]: [&CubeTensor<R>; 4],
    [z, dh, loss]: [&CubeTensor<R>; 3],
    classes: usize,
    rows: &RowForward,
    relu: bool,
) {
    // SAFETY: every access of the kernel is in bounds by construction (see its docs); the
    // tensors are contiguous with the shapes it reads them by, the vector width divides I, and
    // `loss` has one element per cube.
    unsafe {
        kernels::forward::forward_rows::launch_unchecked::<F, E, L, R>(
            &x.client,
            CubeCount::new_1d(rows.cubes as u32),
            CubeDim::new_1d(rows.rows as u32),
            rows.vector,
            x.clone().into_tensor_arg(),
            weight.clone().into_tensor_arg(),
            bias.clone().into_tensor_arg(),
            labels.clone().into_tensor_arg(),
            z.clone().into_tensor_arg(),
            dh.clone().into_tensor_arg(),
            loss.clone().into_tensor_arg(),
            f32::NAN,
            classes,
            rows.rows,
            rows.depth,
            relu,
        );
    }
}

/// `forward_planes` for labels of type `L`: inputs X, W, b, labels; outputs Z, dH, loss.
fn launch_forward_planes<R: CubeRuntime, F: FloatElement, E: FloatElement, L: IntElement>(
    [x, weight, bias, labels]: [&CubeTensor<R>; 4],
    [z, dh, loss]: [&CubeTensor<R>; 3],
    classes: usize,
    planes: &PlaneForward,
    relu: bool,
) {
    // SAFETY: every access of the kernel is in bounds by construction (see its docs); the
    // tensors are contiguous with the shapes it reads them by, the vector width divides I, and
    // `loss` has one element per cube.
    unsafe {
        kernels::forward::forward_planes::launch_unchecked::<F, E, L, R>(
            &x.client,
            CubeCount::new_1d(planes.cubes as u32),
            CubeDim::new_1d(planes.units()),
            planes.vector,
            x.clone().into_tensor_arg(),
            weight.clone().into_tensor_arg(),
            bias.clone().into_tensor_arg(),
            labels.clone().into_tensor_arg(),
            z.clone().into_tensor_arg(),
            dh.clone().into_tensor_arg(),
            loss.clone().into_tensor_arg(),
            f32::NAN,
            classes,
            planes.rows,
            planes.steps,
            planes.mean,
            relu,
        );
    }
}

/// The logits alone: `H [B, C]`, in the forward's layouts and order (H is the activation of the training
/// forward's Z, bit for bit). The plane layout always runs 256-unit cubes here (no mean to
/// write).
pub(super) fn logits<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    relu: bool,
) -> CubeTensor<R> {
    let (batch, inputs, classes) = (x.shape()[0], x.shape()[1], weight.shape()[0]);
    let (x, weight, bias) = (contiguous(x), contiguous(weight), contiguous(bias));
    let h = empty::<R>(&x, [batch, classes]); // [B, C]
    if batch == 0 {
        return h;
    }
    let (client, x_arg, w_arg, b_arg) = (
        &x.client,
        x.clone().into_tensor_arg(),
        weight.into_tensor_arg(),
        bias.into_tensor_arg(),
    );
    let h_arg = h.clone().into_tensor_arg();
    // SAFETY: every access of the kernels is in bounds by construction (see their docs); the
    // tensors are contiguous with the shapes they read them by, and the vector width divides I.
    unsafe {
        if let Some(rows) = RowForward::new(batch, inputs, classes, size_of::<F>()) {
            kernels::logits::logits_rows::launch_unchecked::<F, R>(
                client,
                CubeCount::new_1d(rows.cubes as u32),
                CubeDim::new_1d(rows.rows as u32),
                rows.vector,
                x_arg,
                w_arg,
                b_arg,
                h_arg,
                classes,
                rows.rows,
                rows.depth,
                relu,
            );
        } else {
            let planes = PlaneForward::new(batch, inputs, classes);
            let cubes = PlaneForward::plane_cubes(batch, planes.rows);
            kernels::logits::logits_planes::launch_unchecked::<F, R>(
                client,
                CubeCount::new_1d(cubes as u32),
                CubeDim::new_1d(CUBE_UNITS),
                planes.vector,
                x_arg,
                w_arg,
                b_arg,
                h_arg,
                classes,
                planes.rows,
                planes.steps,
                relu,
            );
        }
    }
    h
}

/// The backward's geometry: cube (t, p) owns column tile t (`units` vectors of N columns) and
/// the rows of chunk p.
struct BackwardGeometry {
    /// Vector width N: 4 up to C = 8, 2 up to 16, 1 above, at most what divides I. Invariant
    /// of register space: each unit holds 2 C N values of W and dW.
    vector: usize,
    /// Rows of X per load group, and units per cube. Tuning, measured on the H200 at C = 4, 10
    /// and 32 (2026-11-30), the step back to back: 8-row groups in cubes of 256 up to C = 16
    /// (0.293 ms at (65536, 1024, 10), against 0.309 with 4-row groups); above, where each
    /// unit holds 2 C scalars of W and dW, 4-row groups in cubes of 128 (0.845 ms at
    /// (65536, 1024, 32), against 0.899 in cubes of 256). Times [`half_loads`] for 2-byte X.
    group: usize,
    units: u32,
    col_tiles: usize,
    chunk_rows: usize,
    chunks: usize,
}

impl BackwardGeometry {
    /// X of `x_bytes` bytes an element.
    fn new(batch: usize, inputs: usize, classes: usize, x_bytes: usize) -> Self {
        let width = match classes {
            0..=8 => 4,
            9..=16 => 2,
            _ => 1,
        };
        let vector = vector_size(inputs, width);
        let (group, units) = if classes <= 16 { (8, 256) } else { (4, 128) };
        let group = group * half_loads(x_bytes);
        let chunk_rows = batch.div_ceil(MAX_CHUNKS).max(MIN_CHUNK_ROWS);
        Self {
            vector,
            group,
            units,
            col_tiles: (inputs / vector).div_ceil(units as usize).max(1),
            chunk_rows,
            chunks: batch.div_ceil(chunk_rows),
        }
    }
}

/// The backward: stages 3 to 6 in one kernel (dX, and per-chunk partial dW and db), then the
/// chunks' sums in order, for the wanted gradients only. X and dX are of type `E` (`F`, or
/// bf16 and f16 read and written natively, [`half_native`]); the rest, dW and db of `F`.
pub(super) fn backward<
    R: CubeRuntime,
    F: FloatElement,
    E: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    wanted: HeadWanted,
    relu: bool,
) -> HeadGradients<CubeBackend<R, F, I, BT>> {
    let (batch, inputs, classes) = (x.shape()[0], x.shape()[1], weight.shape()[0]);
    let (x, weight, z, dh, grad_loss) = (
        contiguous(x),
        contiguous(weight),
        contiguous(z),
        contiguous(dh),
        contiguous(grad_loss),
    );
    let geometry = BackwardGeometry::new(batch, inputs, classes, size_of::<E>());
    let chunks = geometry.chunks;
    let dx = empty::<R>(&x, if wanted.x { [batch, inputs] } else { [1, 1] });
    let dw_part = empty::<R>(&weight, [chunks, classes, inputs]); // [P, C, I]
    let db_part = empty::<R>(&weight, [chunks, classes]); // [P, C]
    note_memory(&db_part);
    if chunks > 0 {
        // SAFETY: every access of the kernel is guarded (see its docs); the tensors are
        // contiguous with the shapes it reads them by, and N divides I.
        unsafe {
            kernels::backward::backward::launch_unchecked::<F, E, R>(
                &x.client,
                CubeCount::new_2d(geometry.col_tiles as u32, chunks as u32),
                CubeDim::new_1d(geometry.units),
                geometry.vector,
                x.clone().into_tensor_arg(),
                weight.into_tensor_arg(),
                z.into_tensor_arg(),
                dh.into_tensor_arg(),
                grad_loss.into_tensor_arg(),
                dx.clone().into_tensor_arg(),
                dw_part.clone().into_tensor_arg(),
                db_part.clone().into_tensor_arg(),
                geometry.chunk_rows as u32,
                classes,
                STAGE_ROWS,
                geometry.group,
                wanted.x,
                relu,
            );
        }
    }
    let (weight, bias) = if wanted.weight && wanted.bias {
        let (dw, db) = partial_sum_pair::<R, F>(dw_part, [classes, inputs], db_part, classes);
        (Some(dw), Some(db))
    } else {
        (
            wanted
                .weight
                .then(|| partial_sum::<R, F>(dw_part, [classes, inputs])),
            wanted.bias.then(|| partial_sum::<R, F>(db_part, [classes])),
        )
    };
    note_memory(&dx);
    HeadGradients {
        x: wanted.x.then_some(dx),
        weight,
        bias,
    }
}

/// Whether the small-C kernels read and write X's half type (bf16, f16) natively on the
/// runtime `R`: CUDA. Elsewhere (wgpu) half-precision inputs go through the f32 impl.
#[cfg_attr(not(feature = "cuda"), allow(clippy::extra_unused_type_parameters))]
pub(super) fn half_native<R: CubeRuntime>() -> bool {
    #[cfg(feature = "cuda")]
    {
        std::any::TypeId::of::<R>() == std::any::TypeId::of::<cubecl::cuda::CudaRuntime>()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

/// The forward and backward kernels for X of `dtype` (bf16 or f16) read natively, sums in f32.
fn half_kernels<R: CubeRuntime, I: IntElement, BT: BoolElement>(
    op: &str,
    dtype: DType,
) -> (Forward<R>, Backward<R, I, BT>) {
    match dtype {
        DType::BF16 => (
            forward::<R, f32, bf16> as Forward<R>,
            backward::<R, f32, bf16, I, BT> as Backward<R, I, BT>,
        ),
        DType::F16 => (
            forward::<R, f32, f16> as Forward<R>,
            backward::<R, f32, f16, I, BT> as Backward<R, I, BT>,
        ),
        other => panic!("{op}: no native half-precision step for {other:?}"),
    }
}

/// The forward at C <= 32 on bf16 or f16 X where [`half_native`]: the forward kernel reads X
/// in its own type, widened to f32 as it is loaded (no f32 copy of X); W and b are widened to
/// f32 (`C (I + 1)` values). Returns the loss `[1]`, Z and dH `[B, C]`, all f32 (never
/// rounded: Z and dH are the backward's operands, [`half_backward`]).
pub(super) fn half_forward<R: CubeRuntime, I: IntElement, BT: BoolElement>(
    op: &str,
    [x, weight, bias, labels]: [CubeTensor<R>; 4],
    relu: bool,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    #[cfg(feature = "testing")]
    super::streamed::routes::SWITCHES
        .half_small
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (step_forward, _) = half_kernels::<R, I, BT>(op, x.dtype);
    step_forward(op, x, up(weight), up(bias), labels, relu)
}

/// The backward at C <= 32 on bf16 or f16 X where [`half_native`], from the f32 Z and dH of
/// [`half_forward`] and the upstream gradient `grad_loss` `[1]` (f32, or widened to it): dX in X's
/// type (written natively), dW and db summed in f32 and rounded once to X's type.
#[allow(clippy::too_many_arguments)]
pub(super) fn half_backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    wanted: HeadWanted,
    relu: bool,
) -> HeadGradients<CubeBackend<R, F, I, BT>> {
    let dtype = x.dtype;
    let (_, step_backward) = half_kernels::<R, I, BT>(op, dtype);
    let g = step_backward(x, up(weight), z, dh, up(grad_loss), wanted, relu);
    let gradients = HeadGradients {
        x: g.x,
        weight: g.weight.map(|t| cast(t, dtype)),
        bias: g.bias.map(|t| cast(t, dtype)),
    };
    if let Some(dw) = &gradients.weight {
        note_memory(dw);
    }
    gradients
}

/// The training step at C <= 32 on bf16 or f16 inputs where [`half_native`]:
/// [`half_forward`], then [`half_backward`] for a unit upstream gradient. Z and dH stay f32
/// between the kernels (never rounded), dW and db are summed in f32 and rounded once, the loss
/// too. The f32 impl's arithmetic on the same values: its results up to the outputs' rounding.
pub(super) fn half_step<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    [x, weight, bias, labels]: [CubeTensor<R>; 4],
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> super::streamed::LossAndGradients<R, F, I, BT> {
    let (dtype, relu) = (x.dtype, kernels.relu());
    let label_dtype = labels.dtype;
    // W widened once for both kernels (`up` of an f32 tensor is that tensor).
    let weight = up(weight);
    let inputs = [x.clone(), weight.clone(), bias, labels];
    let (loss, z, dh) = half_forward::<R, I, BT>(op, inputs, relu);
    let predictions = predict.then(|| {
        let terms = RowTerms::new(kernels.activation);
        predictions_of::<Full<R, I, BT>>(z.clone(), terms, label_dtype)
    });
    let gradients = if wanted.any() {
        let one = Tensor::<Full<R, I, BT>, 1>::ones([1], (&loss.device, DType::F32));
        let one = one.into_primitive().tensor();
        half_backward::<R, F, I, BT>(op, x, weight, z, dh, one, wanted, relu)
    } else {
        HeadGradients::none()
    };
    (cast(loss, dtype), gradients, predictions, None)
}

/// [`forward`] for one pair of types.
type Forward<R> = fn(
    &str,
    CubeTensor<R>,
    CubeTensor<R>,
    CubeTensor<R>,
    CubeTensor<R>,
    bool,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>);

/// [`backward`] for one pair of types (f32 sums).
type Backward<R, I, BT> = fn(
    CubeTensor<R>,
    CubeTensor<R>,
    CubeTensor<R>,
    CubeTensor<R>,
    CubeTensor<R>,
    HeadWanted,
    bool,
) -> HeadGradients<CubeBackend<R, f32, I, BT>>;
