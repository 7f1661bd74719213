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

use crate::backend::{FusedHeadBackend, HeadLimits};
use crate::validate;

/// Units per cube. Element-wise kernels: 256 is a multiple of every plane size and well under
/// every runtime's limit. Row and column reductions: the tree in shared memory needs a power
/// of two, and 256 covers C (or B) of any size with a strided loop.
const CUBE_UNITS: u32 = 256;

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
            // The labels' dtype picks the kernel's integer type; none is converted, so a huge
            // label cannot wrap into [0, C).
            let launch = match labels.dtype {
                DType::I32 => launch_softmax_cross_entropy::<R, F, i32>,
                DType::I64 => launch_softmax_cross_entropy::<R, F, i64>,
                DType::U32 => launch_softmax_cross_entropy::<R, F, u32>,
                DType::U64 => launch_softmax_cross_entropy::<R, F, u64>,
                other => panic!(
                    "=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: labels of dtype {other:?} \
                     are not supported; supported: I32, I64, U32, U64"
                ),
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

    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        let op = "mean_loss";
        check::<R, F>(op, &[&loss_rows]);
        let loss_rows = into_contiguous(loss_rows);
        let out = empty::<R>(&loss_rows, [1]); // [1]
        // Always one cube, also for B = 0, where it writes 0 / 0 = NaN.
        kernels::mean_loss::mean_loss::launch::<F, R>(
            &loss_rows.client,
            CubeCount::new_single(),
            CubeDim::new_1d(CUBE_UNITS),
            loss_rows.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            CUBE_UNITS as usize,
        );
        out
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

/// A new contiguous float tensor of `shape` on `like`'s device.
fn empty<R: CubeRuntime>(like: &CubeTensor<R>, shape: impl Into<Shape>) -> CubeTensor<R> {
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
