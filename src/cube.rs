//! The kernels on any CubeCL runtime: `CubeBackend<R, F, I, BT>` (CUDA, wgpu/Vulkan, ...).
//!
//! Each method follows one order: check dtypes and shapes (the shared `validate` module) ->
//! make contiguous -> allocate -> compute geometry -> launch. A launch with no work is skipped.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fused_head_kernels as kernels;
use cubecl::server::CubeCountSelection;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};
use kernels::softmax_cross_entropy::softmax_cross_entropy as sce;

use crate::backend::{
    FusedHeadBackend, HeadForward, HeadGradients, HeadLimits, HeadPrecision, HeadWanted,
};
use crate::{tma, validate};

/// Units per cube. Element-wise kernels: 256 is a multiple of every plane size and well under
/// every runtime's limit. Row and column reductions: the tree in shared memory needs a power
/// of two, and 256 covers C (or B) of any size with a strided loop.
const CUBE_UNITS: u32 = 256;

/// Up to this many classes, `head_forward` and `head_backward` run the fused small-C kernels
/// (their register arrays grow with C); above, the tiled ones.
const SMALL_CLASSES: usize = 32;

/// Rows per chunk of the small-C backward: at least this many, so that the partial sums of dW
/// stay small next to X. The chunking depends on B only, never on the device, so the same
/// inputs give the same bits on every GPU.
const MIN_CHUNK_ROWS: usize = 64;
/// At most this many chunks (cubes along the batch) in the small-C backward.
const MAX_CHUNKS: usize = 512;
/// Rows of dZ staged in shared memory at a time by the small-C backward (at most 16 KiB at
/// C = 32; one stage per chunk up to B = 65536).
const STAGE_ROWS: usize = 128;

/// The small-C backward's rows per load group and units per cube, by C (measured on the H200
/// at C = 4, 10 and 32, PERF_NOTES.md change 16): 8-row groups in cubes of 256 up to C = 16;
/// above, where each unit holds 2 C scalars of W and dW, 4-row groups in cubes of 128.
fn backward_groups(classes: usize) -> (usize, u32) {
    if classes <= 16 { (8, 256) } else { (4, 128) }
}

/// What the kernels accept: f32 only (the gates are f32 gates), and 32-bit addressing.
const LIMITS: HeadLimits = HeadLimits {
    float_dtypes: Some(&[DType::F32]),
    max_elements: u32::MAX as usize,
};

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FusedHeadBackend
    for CubeBackend<R, F, I, BT>
{
    fn head_limits() -> HeadLimits {
        LIMITS
    }

    fn head_tf32_available(device: &Self::Device) -> bool {
        tf32_available::<R>(&R::client(device))
    }

    fn head_linear_relu_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let op = "linear_relu_forward";
        check::<R, F>(op, &[&x, &weight, &bias]);
        let (batch, _inputs, classes) =
            validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
        let (x, weight, bias) = (
            into_contiguous(x),
            into_contiguous(weight),
            into_contiguous(bias),
        );
        let z = empty::<R>(&x, [batch, classes]); // [B, C]
        let h = empty::<R>(&x, [batch, classes]); // [B, C]
        if let Some((count, dim)) = elementwise(&x, batch * classes) {
            kernels::linear_relu_forward::linear_relu_forward::launch::<F, R>(
                &x.client,
                count,
                dim,
                x.clone().into_tensor_arg(),
                weight.into_tensor_arg(),
                bias.into_tensor_arg(),
                z.clone().into_tensor_arg(),
                h.clone().into_tensor_arg(),
            );
        }
        (z, h)
    }

    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        precision: HeadPrecision,
    ) -> FloatTensor<Self> {
        let op = "head_logits";
        check::<R, F>(op, &[&x, &weight, &bias]);
        let (_batch, _inputs, classes) =
            validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
        let h = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(precision, &x);
            tiled_logits::<R, F>(x, weight, bias, tf32)
        } else {
            small_classes_logits::<R, F>(x, weight, bias)
        };
        start_queued::<R>(&h.device);
        h
    }

    fn head_softmax_cross_entropy(
        h: FloatTensor<Self>,
        labels: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let op = "softmax_cross_entropy";
        check::<R, F>(op, &[&h]);
        h.assert_is_on_same_device(&labels);
        let [batch, classes] = validate::rank2(op, "H [B, C]", &h.shape());
        validate::same_dim(
            op,
            "labels must be [B]",
            &h.shape(),
            &labels.shape(),
            (0, 0),
        );
        let (h, labels) = (into_contiguous(h), into_contiguous(labels));
        let loss = empty::<R>(&h, [batch]); // [B]
        let dh = empty::<R>(&h, [batch, classes]); // [B, C]
        if batch > 0 {
            let launch = match label_type(op, labels.dtype) {
                LabelType::I32 => launch_softmax_cross_entropy::<R, F, i32>,
                LabelType::I64 => launch_softmax_cross_entropy::<R, F, i64>,
                LabelType::U32 => launch_softmax_cross_entropy::<R, F, u32>,
                LabelType::U64 => launch_softmax_cross_entropy::<R, F, u64>,
            };
            launch(h, labels, loss.clone(), dh.clone());
        }
        (loss, dh)
    }

    fn head_relu_backward(
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let op = "relu_backward";
        check::<R, F>(op, &[&z, &dh, &grad_loss]);
        validate::same_shape(op, "Z", &z.shape(), "dH", &dh.shape());
        validate::same_shape(
            op,
            "upstream gradient",
            &grad_loss.shape(),
            "the loss",
            &[1],
        );
        let (z, dh, grad_loss) = (
            into_contiguous(z),
            into_contiguous(dh),
            into_contiguous(grad_loss),
        );
        let [batch, classes] = validate::rank2(op, "Z [B, C]", &z.shape());
        let dz = empty::<R>(&z, [batch, classes]); // [B, C]
        if let Some((count, dim)) = elementwise(&z, batch * classes) {
            kernels::relu_backward::relu_backward::launch::<F, R>(
                &z.client,
                count,
                dim,
                z.clone().into_tensor_arg(),
                dh.into_tensor_arg(),
                grad_loss.into_tensor_arg(),
                dz.clone().into_tensor_arg(),
            );
        }
        dz
    }

    fn head_weight_gradient(dz: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        let op = "weight_gradient";
        check::<R, F>(op, &[&dz, &x]);
        let [_batch, classes] = validate::rank2(op, "dZ [B, C]", &dz.shape());
        let [_, inputs] = validate::rank2(op, "X [B, I]", &x.shape());
        validate::same_dim(
            op,
            "dZ [B, C] and X [B, I] must share B",
            &dz.shape(),
            &x.shape(),
            (0, 0),
        );
        let (dz, x) = (into_contiguous(dz), into_contiguous(x));
        let dw = empty::<R>(&x, [classes, inputs]); // [C, I]
        if let Some((count, dim)) = elementwise(&x, classes * inputs) {
            kernels::weight_gradient::weight_gradient::launch::<F, R>(
                &x.client,
                count,
                dim,
                dz.into_tensor_arg(),
                x.clone().into_tensor_arg(),
                dw.clone().into_tensor_arg(),
            );
        }
        dw
    }

    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        let op = "bias_gradient";
        check::<R, F>(op, &[&dz]);
        let [_batch, classes] = validate::rank2(op, "dZ [B, C]", &dz.shape());
        let dz = into_contiguous(dz);
        let db = empty::<R>(&dz, [classes]); // [C]
        if classes > 0 {
            // One cube per class; with B = 0 each cube writes 0, the sum over no rows.
            let count = CubeCountSelection::new(&dz.client, classes as u32).cube_count();
            kernels::bias_gradient::bias_gradient::launch::<F, R>(
                &dz.client,
                count,
                CubeDim::new_1d(CUBE_UNITS),
                dz.clone().into_tensor_arg(),
                db.clone().into_tensor_arg(),
                CUBE_UNITS as usize,
            );
        }
        db
    }

    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let op = "input_gradient";
        check::<R, F>(op, &[&dz, &weight]);
        let [batch, _classes] = validate::rank2(op, "dZ [B, C]", &dz.shape());
        let [_, inputs] = validate::rank2(op, "W [C, I]", &weight.shape());
        validate::same_dim(
            op,
            "dZ [B, C] and W [C, I] must share C",
            &dz.shape(),
            &weight.shape(),
            (1, 0),
        );
        let (dz, weight) = (into_contiguous(dz), into_contiguous(weight));
        let dx = empty::<R>(&dz, [batch, inputs]); // [B, I]
        if let Some((count, dim)) = elementwise(&dz, batch * inputs) {
            kernels::input_gradient::input_gradient::launch::<F, R>(
                &dz.client,
                count,
                dim,
                dz.clone().into_tensor_arg(),
                weight.into_tensor_arg(),
                dx.clone().into_tensor_arg(),
            );
        }
        dx
    }

    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        precision: HeadPrecision,
    ) -> HeadForward<Self> {
        let op = "head_forward";
        check::<R, F>(op, &[&x, &weight, &bias]);
        x.assert_is_on_same_device(&labels);
        let (_batch, _inputs, classes) =
            validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
        validate::same_dim(
            op,
            "labels must be [B]",
            &x.shape(),
            &labels.shape(),
            (0, 0),
        );
        let (loss, z, dh) = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(precision, &x);
            let (z, h) = tiled_linear_relu_forward::<R, F>(x, weight, bias, tf32); // [B, C] each
            let (loss_rows, dh) = Self::head_softmax_cross_entropy(h, labels); // [B], [B, C]
            (Self::head_mean_loss(loss_rows), z, dh)
        } else {
            small_classes_forward::<R, F>(op, x, weight, bias, labels)
        };
        start_queued::<R>(&loss.device);
        HeadForward { loss, z, dh }
    }

    fn head_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
        wanted: HeadWanted,
        precision: HeadPrecision,
    ) -> HeadGradients<Self> {
        let op = "head_backward";
        check::<R, F>(op, &[&x, &weight, &z, &dh, &grad_loss]);
        let [batch, inputs] = validate::rank2(op, "X [B, I]", &x.shape());
        let [classes, _] = validate::rank2(op, "W [C, I]", &weight.shape());
        validate::same_dim(
            op,
            "X [B, I] and W [C, I] must share I",
            &x.shape(),
            &weight.shape(),
            (1, 1),
        );
        validate::same_shape(op, "Z", &z.shape(), "[B, C]", &[batch, classes]);
        validate::same_shape(op, "dH", &dh.shape(), "[B, C]", &[batch, classes]);
        validate::same_shape(
            op,
            "upstream gradient",
            &grad_loss.shape(),
            "the loss",
            &[1],
        );
        if classes > SMALL_CLASSES {
            let tf32 = use_tf32(precision, &x);
            let device = x.device.clone();
            let grads = tiled_backward::<R, F, I, BT>(x, weight, z, dh, grad_loss, wanted, tf32);
            start_queued::<R>(&device);
            return grads;
        }
        let (x, weight, z, dh, grad_loss) = (
            into_contiguous(x),
            into_contiguous(weight),
            into_contiguous(z),
            into_contiguous(dh),
            into_contiguous(grad_loss),
        );
        // Geometry: each unit owns one vector of N columns; N shrinks as C grows (registers:
        // 2 C N values of W and dW per unit), and divides I.
        let width = match classes {
            0..=8 => 4,
            9..=16 => 2,
            _ => 1,
        };
        let n = vector_size(inputs, width);
        let (group, units) = backward_groups(classes);
        let col_tiles = (inputs / n).div_ceil(units as usize).max(1);
        let chunk_rows = batch.div_ceil(MAX_CHUNKS).max(MIN_CHUNK_ROWS);
        let chunks = batch.div_ceil(chunk_rows);
        let dx = empty::<R>(&x, if wanted.x { [batch, inputs] } else { [1, 1] });
        let dw_part = empty::<R>(&x, [chunks, classes, inputs]); // [P, C, I]
        let db_part = empty::<R>(&x, [chunks, classes]); // [P, C]
        if chunks > 0 {
            // SAFETY: every access of the kernel is guarded (see its docs); the tensors are
            // contiguous with the shapes it reads them by, and N divides I.
            unsafe {
                kernels::small_classes_backward::small_classes_backward::launch_unchecked::<F, R>(
                    &x.client,
                    CubeCount::new_2d(col_tiles as u32, chunks as u32),
                    CubeDim::new_1d(units),
                    n,
                    x.clone().into_tensor_arg(),
                    weight.into_tensor_arg(),
                    z.into_tensor_arg(),
                    dh.into_tensor_arg(),
                    grad_loss.into_tensor_arg(),
                    dx.clone().into_tensor_arg(),
                    dw_part.clone().into_tensor_arg(),
                    db_part.clone().into_tensor_arg(),
                    chunk_rows as u32,
                    classes,
                    STAGE_ROWS,
                    group,
                    wanted.x,
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
        let grads = HeadGradients {
            x: wanted.x.then_some(dx),
            weight,
            bias,
        };
        start_queued::<R>(&x.device);
        grads
    }

    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        let op = "mean_loss";
        check::<R, F>(op, &[&loss_rows]);
        let batch = loss_rows.shape()[0];
        mean_of_parts::<R, F>(into_contiguous(loss_rows), batch)
    }
}

/// `sum(parts) / batch` as a `[1]` tensor: one cube, also for no parts (B = 0 gives 0 / 0 = NaN).
fn mean_of_parts<R: CubeRuntime, F: FloatElement>(
    parts: CubeTensor<R>,
    batch: usize,
) -> CubeTensor<R> {
    let out = empty::<R>(&parts, [1]); // [1]
    // SAFETY: the kernel guards its reads by the parts' length and writes out[0] only.
    unsafe {
        kernels::mean_loss::mean_loss::launch_unchecked::<F, R>(
            &parts.client,
            CubeCount::new_single(),
            CubeDim::new_1d(CUBE_UNITS),
            parts.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            batch as u32,
            CUBE_UNITS as usize,
        );
    }
    out
}

/// The widest vector of at most `max` elements (4, 2 or 1) that divides `len`.
fn vector_size(len: usize, max: usize) -> usize {
    [4, 2, 1]
        .into_iter()
        .find(|&n| n <= max && len.is_multiple_of(n))
        .unwrap_or(1)
}

/// The integer types the label kernels are compiled for.
enum LabelType {
    I32,
    I64,
    U32,
    U64,
}

/// The labels' dtype picks the kernel's integer type; none is converted, so a huge label cannot
/// wrap into [0, C).
fn label_type(op: &str, dtype: DType) -> LabelType {
    match dtype {
        DType::I32 => LabelType::I32,
        DType::I64 => LabelType::I64,
        DType::U32 => LabelType::U32,
        DType::U64 => LabelType::U64,
        other => panic!(
            "=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: labels of dtype {other:?} \
             are not supported; supported: I32, I64, U32, U64"
        ),
    }
}

/// The small-C forward (C <= SMALL_CLASSES): `(loss [1], Z [B, C], dH [B, C])`, as row tiles
/// from [`ROW_TILES_FROM`] rows on, else one plane per group of rows.
fn small_classes_forward<R: CubeRuntime, F: FloatElement>(
    op: &str,
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    labels: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let (batch, classes) = (x.shape()[0], weight.shape()[0]);
    let (x, weight, bias, labels) = (
        into_contiguous(x),
        into_contiguous(weight),
        into_contiguous(bias),
        into_contiguous(labels),
    );
    let z = empty::<R>(&x, [batch, classes]); // [B, C]
    let dh = empty::<R>(&x, [batch, classes]); // [B, C]
    if batch == 0 {
        // No rows: the mean over nothing is 0 / 0 = NaN, as stage 2 + mean_loss give.
        let none = empty::<R>(&x, [0]);
        return (mean_of_parts::<R, F>(none, 0), z, dh);
    }
    if let Some(tiles) = RowTiles::new(batch, x.shape()[1], classes) {
        let loss = empty::<R>(&x, [tiles.cubes]); // the loss sums per cube
        let launch = match label_type(op, labels.dtype) {
            LabelType::I32 => launch_row_tiles_forward::<R, F, i32>,
            LabelType::I64 => launch_row_tiles_forward::<R, F, i64>,
            LabelType::U32 => launch_row_tiles_forward::<R, F, u32>,
            LabelType::U64 => launch_row_tiles_forward::<R, F, u64>,
        };
        launch([&x, &weight, &bias, &labels], [&z, &dh, &loss], &tiles);
        return (mean_of_parts::<R, F>(loss, batch), z, dh);
    }
    let geometry = SmallForward::new(batch, x.shape()[1], classes);
    // The loss sums per cube [cubes], or with one cube the mean itself [1].
    let loss = empty::<R>(&x, [geometry.cubes]);
    let launch = match label_type(op, labels.dtype) {
        LabelType::I32 => launch_small_classes_forward::<R, F, i32>,
        LabelType::I64 => launch_small_classes_forward::<R, F, i64>,
        LabelType::U32 => launch_small_classes_forward::<R, F, u32>,
        LabelType::U64 => launch_small_classes_forward::<R, F, u64>,
    };
    launch([&x, &weight, &bias, &labels], [&z, &dh, &loss], &geometry);
    let loss = if geometry.mean {
        loss
    } else {
        mean_of_parts::<R, F>(loss, batch)
    };
    (loss, z, dh)
}

/// The small-C logits (C <= SMALL_CLASSES): `H [B, C]`, in the small-C forward's kernel family
/// and geometry: row tiles from [`ROW_TILES_FROM`] rows on, else one plane per group of rows
/// with 256-unit cubes.
fn small_classes_logits<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
) -> CubeTensor<R> {
    let (batch, inputs, classes) = (x.shape()[0], x.shape()[1], weight.shape()[0]);
    let (x, weight, bias) = (
        into_contiguous(x),
        into_contiguous(weight),
        into_contiguous(bias),
    );
    let h = empty::<R>(&x, [batch, classes]); // [B, C]
    if batch == 0 {
        return h;
    }
    if let Some(tiles) = RowTiles::new(batch, inputs, classes) {
        // SAFETY: every access of the kernel is in bounds by construction (see its docs); the
        // tensors are contiguous with the shapes it reads them by, and the vector width
        // divides I.
        unsafe {
            kernels::row_tiles::row_tiles_logits::launch_unchecked::<F, R>(
                &x.client,
                CubeCount::new_1d(tiles.cubes as u32),
                CubeDim::new_1d(tiles.rows as u32),
                tiles.vector,
                x.clone().into_tensor_arg(),
                weight.into_tensor_arg(),
                bias.into_tensor_arg(),
                h.clone().into_tensor_arg(),
                classes,
                tiles.rows,
                ROW_TILE_DEPTH,
            );
        }
        return h;
    }
    let geometry = SmallForward::new(batch, inputs, classes);
    let cubes = SmallForward::plane_cubes(batch, geometry.rows);
    // SAFETY: every access of the kernel is in bounds by construction (see its docs); the
    // tensors are contiguous with the shapes it reads them by, and the vector width divides I.
    unsafe {
        kernels::small_classes_logits::small_classes_logits::launch_unchecked::<F, R>(
            &x.client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_1d(CUBE_UNITS),
            geometry.vector,
            x.clone().into_tensor_arg(),
            weight.into_tensor_arg(),
            bias.into_tensor_arg(),
            h.clone().into_tensor_arg(),
            classes,
            geometry.rows,
            geometry.steps,
        );
    }
    h
}

/// Vectors of each row per shared-memory tile of the row-tiled small-C kernels (8 vectors of 4:
/// 32 floats, 128 bytes per row and load group).
const ROW_TILE_DEPTH: usize = 8;

/// From this batch size on, the small-C forward and logits run as row tiles
/// (`kernels::row_tiles`); below it, one plane per group of rows (`small_classes_forward`).
/// Measured on the H200 at I = 1024 (PERF_NOTES.md, change 15), the training step back to
/// back: 0.95x the plane kernels' at (16384, C = 10), 0.85x at (65536, 10), 0.84x and 0.81x at
/// C = 32, but 1.08x at (8192, 10), where one unit per row leaves 2 warps per SM.
const ROW_TILES_FROM: usize = 16384;

/// Launch geometry of the row-tiled small-C forward and logits, a rule of (B, I, C) only: one
/// unit per row, 128 rows per cube up to C = 16, 32 above (the fastest of 32, 64 and 128 rows
/// in PERF_NOTES.md change 15: 128 at C = 10, 32 at C = 32). The rows per cube change only the
/// order of the loss sum, never Z, H or dH.
struct RowTiles {
    classes: usize,
    rows: usize,
    vector: usize,
    cubes: usize,
}

impl RowTiles {
    /// The geometry where the row tiles run: `None` below [`ROW_TILES_FROM`] rows, and for more
    /// cubes than one launch dimension holds on every runtime (65535; the plane kernels stride
    /// over any B).
    fn new(batch: usize, inputs: usize, classes: usize) -> Option<Self> {
        let rows = if classes <= 16 { 128 } else { 32 };
        let cubes = batch.div_ceil(rows);
        (batch >= ROW_TILES_FROM && cubes <= u16::MAX as usize).then(|| Self {
            classes,
            rows,
            vector: vector_size(inputs, 4),
            cubes,
        })
    }
}

/// The row-tiled small-C forward for labels of type `L`: inputs X, W, b, labels; outputs Z,
/// dH, loss.
fn launch_row_tiles_forward<R: CubeRuntime, F: FloatElement, L: IntElement>(
    [x, weight, bias, labels]: [&CubeTensor<R>; 4],
    [z, dh, loss]: [&CubeTensor<R>; 3],
    tiles: &RowTiles,
) {
    // SAFETY: every access of the kernel is in bounds by construction (see its docs); the
    // tensors are contiguous with the shapes it reads them by, the vector width divides I, and
    // `loss` has one element per cube.
    unsafe {
        kernels::row_tiles::row_tiles_forward::launch_unchecked::<F, L, R>(
            &x.client,
            CubeCount::new_1d(tiles.cubes as u32),
            CubeDim::new_1d(tiles.rows as u32),
            tiles.vector,
            x.clone().into_tensor_arg(),
            weight.clone().into_tensor_arg(),
            bias.clone().into_tensor_arg(),
            labels.clone().into_tensor_arg(),
            z.clone().into_tensor_arg(),
            dh.clone().into_tensor_arg(),
            loss.clone().into_tensor_arg(),
            f32::NAN,
            tiles.classes,
            tiles.rows,
            ROW_TILE_DEPTH,
        );
    }
}

/// Launch geometry of the small-C forward, a rule of (B, I, C) only.
struct SmallForward {
    classes: usize,
    /// Rows per plane: 2 up to C = 16, else 1. Measured at (65536, 1024, 10) on the H200
    /// (PERF_NOTES.md, change 6): 2 rows (64 registers, 47% occupancy) 167 us, 4 rows (128
    /// registers, 24%) 211 us; each W load serves all the rows, so 1 row is not better either.
    rows: usize,
    /// Vector width of the X and W loads (4, 2 or 1, dividing I).
    vector: usize,
    /// Segments of each row loaded per pass: about 8 elements of X in flight per lane (more,
    /// at 2 rows, measured slower: 179 us).
    steps: usize,
    /// Cubes of 256 units (8 planes of 32 on CUDA).
    cubes: usize,
    /// One cube that writes the mean itself (small B: one launch fewer).
    mean: bool,
}

/// Up to this many 256-unit cubes' worth of rows, the small-C forward runs as one cube of 512
/// units that also writes the mean (each plane then walks at most 2 groups of rows).
const ONE_CUBE_UP_TO: usize = 4;

impl SmallForward {
    fn new(batch: usize, inputs: usize, classes: usize) -> Self {
        let rows = if classes <= 16 { 2 } else { 1 };
        let vector = vector_size(inputs, 4);
        let steps = (8 / (rows * vector)).max(1);
        let needed = Self::plane_cubes(batch, rows);
        let mean = needed <= ONE_CUBE_UP_TO;
        let cubes = if mean { 1 } else { needed };
        Self {
            classes,
            rows,
            vector,
            steps,
            cubes,
            mean,
        }
    }

    /// 256-unit cubes for one group of `rows` rows per plane: with 32-unit planes, 8 planes per
    /// cube (smaller planes only add planes). Planes stride over the groups of rows, so the
    /// capped count covers any B.
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

/// The small-C forward for labels of type `L`: inputs X, W, b, labels; outputs Z, dH, loss.
fn launch_small_classes_forward<R: CubeRuntime, F: FloatElement, L: IntElement>(
    [x, weight, bias, labels]: [&CubeTensor<R>; 4],
    [z, dh, loss]: [&CubeTensor<R>; 3],
    geometry: &SmallForward,
) {
    // SAFETY: every access of the kernel is in bounds by construction (see its docs); the
    // tensors are contiguous with the shapes it reads them by, the vector width divides I, and
    // `loss` has one element per cube.
    unsafe {
        kernels::small_classes_forward::small_classes_forward::launch_unchecked::<F, L, R>(
            &x.client,
            CubeCount::new_1d(geometry.cubes as u32),
            CubeDim::new_1d(geometry.units()),
            geometry.vector,
            x.clone().into_tensor_arg(),
            weight.clone().into_tensor_arg(),
            bias.clone().into_tensor_arg(),
            labels.clone().into_tensor_arg(),
            z.clone().into_tensor_arg(),
            dh.clone().into_tensor_arg(),
            loss.clone().into_tensor_arg(),
            f32::NAN,
            geometry.classes,
            geometry.rows,
            geometry.steps,
            geometry.mean,
        );
    }
}

/// `out = sum_p part[p]`, in order, for a partial-sum tensor [P, ...] reshaped to `shape`. One
/// part is the sum itself: it is returned as it is (the same memory), with no launch.
fn partial_sum<R: CubeRuntime, F: FloatElement>(
    part: CubeTensor<R>,
    shape: impl Into<Shape>,
) -> CubeTensor<R> {
    let shape = shape.into();
    if part.shape()[0] == 1 {
        return burn_cubecl::ops::reshape(part, shape);
    }
    let out = empty::<R>(&part, shape);
    let n = out.shape().num_elements();
    // OUTPUTS outputs per cube of 256 units; idle units past n write nothing.
    let cubes = n.div_ceil(kernels::partial_sum::OUTPUTS);
    if let Some((count, dim)) = elementwise(&out, cubes * CUBE_UNITS as usize) {
        // SAFETY: the kernel guards every read and write by the output's length.
        unsafe {
            kernels::partial_sum::partial_sum::launch_unchecked::<F, R>(
                &out.client,
                count,
                dim,
                part.into_tensor_arg(),
                out.clone().into_tensor_arg(),
            );
        }
    }
    out
}

/// The sums of two `[P, ..]` partials (dW's and db's, the same P) in one launch: the first's
/// outputs reshaped to `shape_a`, the second's to `[width_b]`. With one part, both are
/// reshapes; with none, both are zeros.
fn partial_sum_pair<R: CubeRuntime, F: FloatElement>(
    part_a: CubeTensor<R>,
    shape_a: impl Into<Shape>,
    part_b: CubeTensor<R>,
    width_b: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let shape_a = shape_a.into();
    if part_a.shape()[0] == 1 {
        return (
            burn_cubecl::ops::reshape(part_a, shape_a),
            burn_cubecl::ops::reshape(part_b, Shape::from([width_b])),
        );
    }
    let out_a = empty::<R>(&part_a, shape_a);
    let out_b = empty::<R>(&part_b, [width_b]);
    let cubes_a = out_a
        .shape()
        .num_elements()
        .div_ceil(kernels::partial_sum::OUTPUTS);
    let cubes_b = width_b.div_ceil(kernels::partial_sum::OUTPUTS);
    if let Some((count, dim)) = elementwise(&out_a, (cubes_a + cubes_b) * CUBE_UNITS as usize) {
        // SAFETY: the kernel guards every read and write by its output's length.
        unsafe {
            kernels::partial_sum::partial_sum_pair::launch_unchecked::<F, R>(
                &out_a.client,
                count,
                dim,
                part_a.into_tensor_arg(),
                out_a.clone().into_tensor_arg(),
                part_b.into_tensor_arg(),
                out_b.clone().into_tensor_arg(),
                cubes_a as u32,
            );
        }
    }
    (out_a, out_b)
}

/// Cube counts of the tiled and TF32 kernels (both tile by 128): (columns of tiles, rows of
/// tiles, slices of K) of an `[M, N]` output.
fn tile_grid(op: &str, m: usize, n: usize, slices: usize) -> CubeCount {
    use kernels::tiled_matmul::TILE;
    let (x, y) = (n.div_ceil(TILE), m.div_ceil(TILE));
    if y > u16::MAX as usize || x > u16::MAX as usize {
        panic!(
            "=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: an output of [{m}, {n}] \
             needs more than 65535 tiles of {TILE} along one side"
        );
    }
    CubeCount::new_3d(x as u32, y as u32, slices as u32)
}

/// `P = X W^T` `[B, C]` by Burn's own TF32 matmul ([`tma::tf32_matmul`]) for contiguous X and
/// W, where it takes them; `None` elsewhere (the caller then runs its own kernel). Bias and ReLU
/// are the caller's.
fn tma_logits_product<R: CubeRuntime>(
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
) -> Option<CubeTensor<R>> {
    let w_t = burn_cubecl::ops::permute(weight.clone(), &[1, 0]); // [I, C] view
    tma::tf32_matmul(x.clone(), w_t, tma::Product::Logits)
}

/// The logits alone with a tiled product: H `[B, C]`. With `tf32` (the caller checked
/// [`tf32_available`]) and where [`tma_logits_product`] runs, bias and ReLU in place of the
/// product (`bias_relu_in_place`): no Z is ever allocated. Elsewhere, stage 1's tiled kernels
/// ([`tiled_forward_kernels`]), whose Z is dropped.
fn tiled_logits<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    tf32: bool,
) -> CubeTensor<R> {
    let (x, weight, bias) = (
        into_contiguous(x),
        into_contiguous(weight),
        into_contiguous(bias),
    );
    if let Some(h) = tf32.then(|| tma_logits_product(&x, &weight)).flatten() {
        if let Some((count, dim)) = elementwise(&h, h.shape().num_elements()) {
            // SAFETY: the kernel guards every access by the product's length; it and b are
            // contiguous.
            unsafe {
                kernels::bias_relu::bias_relu_in_place::launch_unchecked::<F, R>(
                    &h.client,
                    count,
                    dim,
                    h.clone().into_tensor_arg(),
                    bias.into_tensor_arg(),
                );
            }
        }
        return h;
    }
    tiled_forward_kernels::<R, F>(x, weight, bias, tf32).1
}

/// Stage 1 with a tiled product: `(Z, H)`, `[B, C]` each; exact f32, or on TF32 tensor cores
/// with `tf32` (the caller checked [`tf32_available`]): there, Burn's own TMA matmul where it
/// accepts the problem ([`tma_logits_product`], then `bias_relu`), else our own kernels
/// ([`tiled_forward_kernels`]).
fn tiled_linear_relu_forward<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    tf32: bool,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let (x, weight, bias) = (
        into_contiguous(x),
        into_contiguous(weight),
        into_contiguous(bias),
    );
    let [batch, classes] = [x.shape()[0], weight.shape()[0]];
    // TF32 where Burn's own TF32 matmul runs: Z = X W^T, then bias and ReLU (Z in place, H).
    if let Some(z) = tf32.then(|| tma_logits_product(&x, &weight)).flatten() {
        let h = empty::<R>(&z, [batch, classes]); // [B, C]
        if let Some((count, dim)) = elementwise(&z, batch * classes) {
            // SAFETY: the kernel guards every access by Z's length; Z, H, b are contiguous.
            unsafe {
                kernels::bias_relu::bias_relu::launch_unchecked::<F, R>(
                    &z.client,
                    count,
                    dim,
                    z.clone().into_tensor_arg(),
                    bias.into_tensor_arg(),
                    h.clone().into_tensor_arg(),
                );
            }
        }
        return (z, h);
    }
    tiled_forward_kernels::<R, F>(x, weight, bias, tf32)
}

/// Stage 1 on our own tiled kernels: `(Z, H)`, `[B, C]` each, for contiguous X, W and b; exact
/// f32, or on TF32 tensor cores (`cmma`) with `tf32`.
fn tiled_forward_kernels<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    tf32: bool,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [batch, inputs] = [x.shape()[0], x.shape()[1]];
    let classes = weight.shape()[0];
    let z = empty::<R>(&x, [batch, classes]); // [B, C]
    let h = empty::<R>(&x, [batch, classes]); // [B, C]
    if batch * classes == 0 {
        return (z, h);
    }
    let grid = tile_grid("head_forward", batch, classes, 1);
    let (client, x, w, b) = (
        &x.client,
        x.clone().into_tensor_arg(),
        weight.into_tensor_arg(),
        bias.into_tensor_arg(),
    );
    let (z_arg, h_arg) = (z.clone().into_tensor_arg(), h.clone().into_tensor_arg());
    // SAFETY: the kernels guard every global read and write by the shapes; X and W are
    // contiguous with I their last dimension, which the TF32 kernel's vector width divides.
    unsafe {
        if tf32 {
            let vector = vector_size(inputs, 4);
            kernels::tf32_linear_relu_forward::tf32_linear_relu_forward::launch_unchecked::<F, R>(
                client,
                grid,
                CubeDim::new_1d(kernels::tf32_matmul::UNITS),
                vector,
                x,
                w,
                b,
                z_arg,
                h_arg,
                4 / vector,
            );
        } else {
            kernels::tiled_linear_relu_forward::tiled_linear_relu_forward::launch_unchecked::<F, R>(
                client,
                grid,
                CubeDim::new_1d(kernels::tiled_matmul::UNITS),
                x,
                w,
                b,
                z_arg,
                h_arg,
            );
        }
    }
    (z, h)
}

/// Tiles an output should have to fill a GPU; fewer, and the tiled product splits K. A rule of
/// the shape alone (never of the device), so the same inputs give the same bits everywhere.
const ENOUGH_TILES: usize = 256;
/// The split-K partials stay below this many elements (1 GiB of f32 would be too much).
const MAX_SPLIT_ELEMENTS: usize = 1 << 25;

/// Slices of K for an `[M, N]` output: `(slices, k_per_slice)`, k_per_slice a multiple of the
/// kernel's step `depth` and at least 256, so that each slice still runs 32 steps.
fn split_k(m: usize, n: usize, k: usize, depth: usize) -> (usize, usize) {
    use kernels::tiled_matmul::TILE;
    let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
    let wanted = ENOUGH_TILES.div_ceil(tiles.max(1));
    let slices = wanted
        .min(k.div_ceil(256))
        .min(MAX_SPLIT_ELEMENTS / (m * n).max(1))
        .clamp(1, 64);
    let k_per_slice = k.div_ceil(slices).div_ceil(depth).max(1) * depth;
    (k.div_ceil(k_per_slice).max(1), k_per_slice)
}

/// `A B` with a tiled product, `[M, N]`, exact f32 or on TF32 tensor cores with `tf32` (the
/// caller checked [`tf32_available`]); see `kernels::tiled_matmul` for the two layouts. An
/// output with few tiles splits K into slices added in order by `partial_sum`. With `tf32` and
/// no split, Burn's own TMA matmul where it accepts the problem ([`tma::tf32_matmul`]).
fn tiled_matmul<R: CubeRuntime, F: FloatElement>(
    a: &CubeTensor<R>,
    b: &CubeTensor<R>,
    [m, n]: [usize; 2],
    a_k_contiguous: bool,
    b_k_contiguous: bool,
    tf32: bool,
    product: tma::Product,
) -> CubeTensor<R> {
    let k = a.shape()[if a_k_contiguous { 1 } else { 0 }];
    let depth = if tf32 {
        kernels::tf32_matmul::DEPTH
    } else {
        kernels::tiled_matmul::DEPTH
    };
    let (slices, k_per_slice) = split_k(m, n, k, depth);
    // TF32 with enough tiles not to split K: Burn's own TF32 matmul on [M, K] and [K, N] views
    // of the stored operands (transposes in place), where it takes them.
    if tf32 && slices == 1 {
        let a_mk = if a_k_contiguous {
            a.clone()
        } else {
            burn_cubecl::ops::permute(a.clone(), &[1, 0])
        };
        let b_kn = if b_k_contiguous {
            burn_cubecl::ops::permute(b.clone(), &[1, 0])
        } else {
            b.clone()
        };
        if let Some(out) = tma::tf32_matmul(a_mk, b_kn, product) {
            return out;
        }
    }
    let out = empty::<R>(a, [slices, m, n]); // one product per slice of K
    if m * n > 0 {
        // With K = 0 every tile writes zeros: the empty sum.
        let grid = tile_grid("head_backward", m, n, slices);
        let (a_arg, b_arg) = (a.clone().into_tensor_arg(), b.clone().into_tensor_arg());
        let out_arg = out.clone().into_tensor_arg();
        // SAFETY: the kernels guard every global read and write by the shapes; the operands are
        // contiguous and each TF32 vector width divides its operand's last dimension.
        unsafe {
            if tf32 {
                // Vectors along each operand's stored contiguous dimension (its last).
                let (a_vector, b_vector) =
                    (vector_size(a.shape()[1], 4), vector_size(b.shape()[1], 4));
                kernels::tf32_matmul::tf32_matmul::launch_unchecked::<F, R>(
                    &a.client,
                    grid,
                    CubeDim::new_1d(kernels::tf32_matmul::UNITS),
                    a_vector,
                    b_vector,
                    a_arg,
                    b_arg,
                    out_arg,
                    k_per_slice as u32,
                    a_k_contiguous,
                    b_k_contiguous,
                    4 / a_vector,
                    4 / b_vector,
                );
            } else {
                kernels::tiled_matmul::tiled_matmul::launch_unchecked::<F, R>(
                    &a.client,
                    grid,
                    CubeDim::new_1d(kernels::tiled_matmul::UNITS),
                    a_arg,
                    b_arg,
                    out_arg,
                    k_per_slice as u32,
                    a_k_contiguous,
                    b_k_contiguous,
                );
            }
        }
    }
    // One slice is the product itself (reshaped, no launch).
    partial_sum::<R, F>(out, [m, n])
}

/// Whether a large-C product runs on TF32 tensor cores: allowed by `precision` and available
/// on the device of `like`.
fn use_tf32<R: CubeRuntime>(precision: HeadPrecision, like: &CubeTensor<R>) -> bool {
    precision == HeadPrecision::Tf32 && tf32_available::<R>(&like.client)
}

/// The TF32 kernels need the cmma configuration m16 n16 k8 with TF32 inputs and f32
/// accumulators, and planes of exactly 32 units (they split a cube of 256 into 8 planes).
fn tf32_available<R: CubeRuntime>(client: &cubecl::client::ComputeClient<R>) -> bool {
    use cubecl::ir::features::MmaConfig;
    use cubecl::ir::{ElemType, FloatKind};
    use kernels::tf32_matmul::{FRAG, FRAG_K, PLANE};
    let props = client.properties();
    let config = MmaConfig {
        a_type: ElemType::Float(FloatKind::TF32).into(),
        b_type: ElemType::Float(FloatKind::TF32).into(),
        cd_type: ElemType::Float(FloatKind::F32).into(),
        m: FRAG as u32,
        n: FRAG as u32,
        k: FRAG_K as u32,
    };
    props.features.matmul.cmma.contains(&config)
        && props.hardware.plane_size_min == PLANE
        && props.hardware.plane_size_max == PLANE
}

/// The large-C backward: stage 3 and stage 5 kernels, then dW = dZ^T X and dX = dZ W tiled
/// (on TF32 tensor cores with `tf32`).
fn tiled_backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    wanted: HeadWanted,
    tf32: bool,
) -> HeadGradients<CubeBackend<R, F, I, BT>> {
    type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
    let dz = B::<R, F, I, BT>::head_relu_backward(z, dh, grad_loss); // [B, C]
    let (x, weight) = (into_contiguous(x), into_contiguous(weight));
    let [batch, classes] = [dz.shape()[0], dz.shape()[1]];
    let inputs = x.shape()[1];
    HeadGradients {
        // dW [C, I] = dZ^T X: A = dZ^T read from dZ stored [B, C]; B = X stored [B, I].
        weight: wanted.weight.then(|| {
            tiled_matmul::<R, F>(
                &dz,
                &x,
                [classes, inputs],
                false,
                false,
                tf32,
                tma::Product::WeightGradient,
            )
        }),
        bias: wanted
            .bias
            .then(|| B::<R, F, I, BT>::head_bias_gradient(dz.clone())),
        // dX [B, I] = dZ W: A = dZ stored [B, C]; B = W stored [C, I].
        x: wanted.x.then(|| {
            tiled_matmul::<R, F>(
                &dz,
                &weight,
                [batch, inputs],
                true,
                false,
                tf32,
                tma::Product::InputGradient,
            )
        }),
    }
}

/// Stage 2's launch for labels of type `L`: one cube per row; idle cubes past B (hardware
/// limits on one axis) leave at once.
fn launch_softmax_cross_entropy<R: CubeRuntime, F: FloatElement, L: IntElement>(
    h: CubeTensor<R>,
    labels: CubeTensor<R>,
    loss: CubeTensor<R>,
    dh: CubeTensor<R>,
) {
    let batch = h.shape()[0];
    let count = CubeCountSelection::new(&h.client, batch as u32).cube_count();
    let client = h.client.clone();
    sce::launch::<F, L, R>(
        &client,
        count,
        CubeDim::new_1d(CUBE_UNITS),
        h.into_tensor_arg(),
        labels.into_tensor_arg(),
        loss.into_tensor_arg(),
        dh.into_tensor_arg(),
        f32::NAN,
        CUBE_UNITS as usize,
    );
}

/// Every float input is F (the kernels are compiled for F), on one device, and the kernels run
/// that dtype.
fn check<R: CubeRuntime, F: FloatElement>(op: &str, tensors: &[&CubeTensor<R>]) {
    let dtypes: Vec<DType> = tensors.iter().map(|t| t.dtype).collect();
    validate::float_dtypes(op, &LIMITS, &dtypes);
    if dtypes[0] != F::dtype() {
        panic!(
            "=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: tensors of dtype {:?} on a backend \
             whose float is {:?}",
            dtypes[0],
            F::dtype()
        );
    }
    for t in &tensors[1..] {
        tensors[0].assert_is_on_same_device(t);
    }
    let counts: Vec<(&str, usize)> = tensors
        .iter()
        .map(|t| ("an input", t.shape().num_elements()))
        .collect();
    validate::element_counts(op, &LIMITS, &counts);
}

/// Hands the launches queued so far on `device` to its server thread now. CubeCL 0.10
/// sends launches to one server thread per device, which takes them in batches of 32 or at a
/// flush (a sync is one): without this, a step of a few launches would wait for the caller's
/// sync before any kernel started, and the GPU would sit idle while the host builds the rest
/// of the step. Does not wait for anything. Measured on the H200 (PERF_NOTES.md, change 14):
/// the synced step at (64, 128, 10) -29% without fusion, -27% with; at (65536, 1024, 10) the
/// synced step also waits for the server thread to wake from its sleeps, which this cannot
/// hasten (PERF_NOTES.md, "The synced step's extra ~0.2 ms").
fn start_queued<R: CubeRuntime>(device: &R::Device) {
    use cubecl::device::Device;
    cubecl::device_handle::DeviceHandle::<R::Server>::new(device.to_id()).flush_queue();
}

/// A new contiguous float tensor of `shape` on `like`'s device.
pub(crate) fn empty<R: CubeRuntime>(
    like: &CubeTensor<R>,
    shape: impl Into<Shape>,
) -> CubeTensor<R> {
    let shape = shape.into();
    validate::element_counts("allocate", &LIMITS, &[("an output", shape.num_elements())]);
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), shape, like.dtype)
}

/// Geometry of a one-unit-per-element kernel over `n` elements, or `None` when there is no work.
fn elementwise<R: CubeRuntime>(like: &CubeTensor<R>, n: usize) -> Option<(CubeCount, CubeDim)> {
    (n > 0).then(|| {
        let dim = CubeDim::new_1d(CUBE_UNITS);
        (calculate_cube_count_elemwise(&like.client, n, dim), dim)
    })
}
