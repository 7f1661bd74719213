//! Host launches of the six stage kernels (`kernels::stages`): what the trait's
//! stage methods run on the CubeCL backends. The fast path never calls these; the tests gate
//! it against them.
//!
//! Each function: check dtypes and shapes -> make contiguous -> allocate -> geometry -> launch.
//! A launch with no work is skipped.

use burn::tensor::TensorMetadata;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeRuntime, FloatElement, IntElement};
use burn_fused_head_kernels::stages as stage;
use cubecl::CubeDim;
use cubecl::server::CubeCountSelection;

use super::launch::{
    CUBE_UNITS, by_label_type, check, contiguous, elementwise, empty, mean_of_parts,
};
use crate::validate;

/// Stage 1: `(Z, H)`, `[B, C]` each; one unit per element.
pub(super) fn linear_relu_forward<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let op = "linear_relu_forward";
    check::<R>(op, &[&x, &weight, &bias]);
    let (batch, _inputs, classes) =
        validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
    let (x, weight, bias) = (contiguous(x), contiguous(weight), contiguous(bias));
    let z = empty::<R>(&x, [batch, classes]); // [B, C]
    let h = empty::<R>(&x, [batch, classes]); // [B, C]
    if let Some((count, dim)) = elementwise(&x, batch * classes) {
        stage::linear_relu_forward::linear_relu_forward::launch::<F, R>(
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

/// Stage 2: `(loss_rows [B], dH [B, C])`; one cube per row.
pub(super) fn softmax_cross_entropy<R: CubeRuntime, F: FloatElement>(
    h: CubeTensor<R>,
    labels: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let op = "softmax_cross_entropy";
    check::<R>(op, &[&h]);
    h.assert_is_on_same_device(&labels);
    let [batch, classes] = validate::rank2(op, "H [B, C]", &h.shape());
    validate::same_dim(
        op,
        "labels must be [B]",
        &h.shape(),
        &labels.shape(),
        (0, 0),
    );
    let (h, labels) = (contiguous(h), contiguous(labels));
    let loss = empty::<R>(&h, [batch]); // [B]
    let dh = empty::<R>(&h, [batch, classes]); // [B, C]
    if batch > 0 {
        let launch = by_label_type!(op, labels.dtype, launch_softmax_cross_entropy::<R, F>);
        launch(h, labels, loss.clone(), dh.clone());
    }
    (loss, dh)
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
    stage::softmax_cross_entropy::softmax_cross_entropy::launch::<F, L, R>(
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

/// Stage 3: `dZ = dH [Z > 0] g`, `[B, C]`; one unit per element.
pub(super) fn relu_backward<R: CubeRuntime, F: FloatElement>(
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
) -> CubeTensor<R> {
    let op = "relu_backward";
    check::<R>(op, &[&z, &dh, &grad_loss]);
    validate::same_shape(op, "Z", &z.shape(), "dH", &dh.shape());
    validate::same_shape(
        op,
        "upstream gradient",
        &grad_loss.shape(),
        "the loss",
        &[1],
    );
    let (z, dh, grad_loss) = (contiguous(z), contiguous(dh), contiguous(grad_loss));
    let [batch, classes] = validate::rank2(op, "Z [B, C]", &z.shape());
    let dz = empty::<R>(&z, [batch, classes]); // [B, C]
    if let Some((count, dim)) = elementwise(&z, batch * classes) {
        stage::relu_backward::relu_backward::launch::<F, R>(
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

/// Stage 4: `dW = dZ^T X`, `[C, I]`; one unit per element of dW.
pub(super) fn weight_gradient<R: CubeRuntime, F: FloatElement>(
    dz: CubeTensor<R>,
    x: CubeTensor<R>,
) -> CubeTensor<R> {
    let op = "weight_gradient";
    check::<R>(op, &[&dz, &x]);
    let [_batch, classes] = validate::rank2(op, "dZ [B, C]", &dz.shape());
    let [_, inputs] = validate::rank2(op, "X [B, I]", &x.shape());
    validate::same_dim(
        op,
        "dZ [B, C] and X [B, I] must share B",
        &dz.shape(),
        &x.shape(),
        (0, 0),
    );
    let (dz, x) = (contiguous(dz), contiguous(x));
    let dw = empty::<R>(&x, [classes, inputs]); // [C, I]
    if let Some((count, dim)) = elementwise(&x, classes * inputs) {
        stage::weight_gradient::weight_gradient::launch::<F, R>(
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

/// Stage 5: `db = column_sum(dZ)`, `[C]`; one cube per class.
pub(super) fn bias_gradient<R: CubeRuntime, F: FloatElement>(dz: CubeTensor<R>) -> CubeTensor<R> {
    let op = "bias_gradient";
    check::<R>(op, &[&dz]);
    let [_batch, classes] = validate::rank2(op, "dZ [B, C]", &dz.shape());
    let dz = contiguous(dz);
    let db = empty::<R>(&dz, [classes]); // [C]
    if classes > 0 {
        // One cube per class; with B = 0 each cube writes 0, the sum over no rows.
        let count = CubeCountSelection::new(&dz.client, classes as u32).cube_count();
        stage::bias_gradient::bias_gradient::launch::<F, R>(
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

/// Stage 6: `dX = dZ W`, `[B, I]`; one unit per element of dX.
pub(super) fn input_gradient<R: CubeRuntime, F: FloatElement>(
    dz: CubeTensor<R>,
    weight: CubeTensor<R>,
) -> CubeTensor<R> {
    let op = "input_gradient";
    check::<R>(op, &[&dz, &weight]);
    let [batch, _classes] = validate::rank2(op, "dZ [B, C]", &dz.shape());
    let [_, inputs] = validate::rank2(op, "W [C, I]", &weight.shape());
    validate::same_dim(
        op,
        "dZ [B, C] and W [C, I] must share C",
        &dz.shape(),
        &weight.shape(),
        (1, 0),
    );
    let (dz, weight) = (contiguous(dz), contiguous(weight));
    let dx = empty::<R>(&dz, [batch, inputs]); // [B, I]
    if let Some((count, dim)) = elementwise(&dz, batch * inputs) {
        stage::input_gradient::input_gradient::launch::<F, R>(
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

/// The batch mean of the per-row losses, `[1]` (B = 0 gives NaN, 0 / 0).
pub(super) fn mean_loss<R: CubeRuntime, F: FloatElement>(
    loss_rows: CubeTensor<R>,
) -> CubeTensor<R> {
    check::<R>("mean_loss", &[&loss_rows]);
    let batch = loss_rows.shape()[0];
    mean_of_parts::<R, F>(contiguous(loss_rows), batch)
}
