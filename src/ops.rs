//! The public functions: the op on tensors, its logits, and a label check.

use burn::tensor::{Int, Tensor, TensorPrimitive};

use crate::backend::{FusedHeadBackend, HeadOptions};
use crate::loss::{HeadLoss, HeadReduction};
use crate::validate;

/// `mean_r cross_entropy(softmax(ReLU(X W^T + b))[r], labels[r])`, shape `[1]`.
///
/// [`linear_relu_cross_entropy_with`] takes [`HeadOptions`]: the precision of the large-C
/// products, and the activation ([`HeadActivation::Identity`](crate::HeadActivation) for
/// cross-entropy on `X W^T + b` itself, as `Linear` + `CrossEntropyLoss`).
///
/// - `x`: X `[B, I]`; `weight`: W stored `[C, I]`; `bias`: b `[C]`; `labels`: `[B]`, integers in `[0, C)`.
/// - Any leading dims, as `Linear` takes them: X `[d0, .., dk, I]` with labels `[d0, .., dk]`
///   is the op on the `B = d0 .. dk` rows (a reshape, no copy of contiguous data); the
///   gradient of X comes back in X's shape.
/// - On an [`Autodiff`](burn::backend::Autodiff) backend the result is tracked:
///   `loss.backward()` gives the gradients of X, W and b (those that require them), scaled by
///   the upstream gradient, so the loss may be multiplied or added to other losses.
/// - A label outside `[0, C)` never reaches memory as an index: its row's loss is NaN, so the
///   mean and every gradient are NaN. Call [`validate_labels`] first for an error instead.
/// - An empty batch (B = 0) gives NaN, as PyTorch's mean over nothing; its gradients are zero.
///
/// # Panics
/// Before anything runs, on mismatched shapes (the I of X and W, b not `[C]`, labels not `[B]`,
/// C = 0), inputs on different devices, float dtypes that differ or that the backend's kernels
/// do not run (the CubeCL kernels run f32), or tensors too large for the kernels' addressing.
pub fn linear_relu_cross_entropy<B: FusedHeadBackend, const D: usize, const DL: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, DL, Int>,
) -> Tensor<B, 1> {
    linear_relu_cross_entropy_with(x, weight, bias, labels, HeadOptions::new())
}

/// [`linear_relu_cross_entropy`] with [`HeadOptions`] (or a bare
/// [`HeadPrecision`](crate::HeadPrecision) or [`HeadActivation`](crate::HeadActivation)):
/// - precision: `HeadPrecision::Tf32` allows TF32 tensor cores for the large-C products where
///   the device has them ([`FusedHeadBackend::head_tf32_available`]), forward and backward;
///   elsewhere it runs exact;
/// - activation: `HeadActivation::Relu` (the default) or `HeadActivation::Identity`, which
///   computes `mean_r cross_entropy(softmax(X W^T + b)[r], labels[r])`.
///
/// Same checks, panics and edge cases as [`linear_relu_cross_entropy`].
pub fn linear_relu_cross_entropy_with<B: FusedHeadBackend, const D: usize, const DL: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, DL, Int>,
    options: impl Into<HeadOptions>,
) -> Tensor<B, 1> {
    let op = "linear_relu_cross_entropy";
    let labels = rows_of_labels(op, &x, labels); // [B]
    let x = rows_of(op, x); // [B, I]
    validate::head_tensors(
        "linear_relu_cross_entropy",
        &x,
        &weight,
        &bias,
        Some(&labels),
    );
    let loss = B::linear_relu_cross_entropy(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        labels.into_primitive(),
        options.into(),
    );
    Tensor::from_primitive(TensorPrimitive::Float(loss))
}

/// The op under the cross-entropy options of Burn's `CrossEntropyLossConfig` and PyTorch's
/// `cross_entropy`, [`HeadLoss`]: ignored rows (`ignore_index`, `pad_tokens`), class weights,
/// label smoothing and the reductions mean, sum and none, with PyTorch's semantics. For row r
/// with label y, `lp = log_softmax(act(X W^T + b)[r])`, class weights w and smoothing e:
///
/// ```text
/// L[r] = (1 - e) w[y] (-lp[y]) + (e / C) sum_c w[c] (-lp[c])       (0 for an ignored row)
/// mean = sum_r L[r] / sum_r w[y_r] (the rows not ignored)     sum = sum_r L[r]     none = L
/// ```
///
/// Returns `[1]` for the mean and the sum, and for [`HeadReduction::None`] the `[N]` losses of
/// the rows in order (`N = d0 .. dk`; `.reshape(labels.dims())` gives them the labels' shape);
/// tracked on an [`Autodiff`](burn::backend::Autodiff) backend for any upstream gradient.
///
/// - Plain options ([`HeadLoss::is_plain`]) run [`linear_relu_cross_entropy_with`], bit for bit.
/// - Without smoothing, C > 32 on the CubeCL backends runs the streamed path (no `[B, C]`
///   tensor) with each row's weight in its row kernel; the per-row reduction computes its
///   losses in the forward pass and runs the streamed pass again in the backward step, for
///   the per-row upstream gradient (twice the products of the mean). Label smoothing, C <= 32 and
///   the stock-op backends run the materialized path: Z from the op's logits kernels, the
///   row algebra in stock ops on `[B, C]` (f32 for bf16 inputs), the gradients from the op's
///   backward kernels; it holds Z and the rows' gradients, two `[B, C]` tensors.
/// - A label outside `[0, C)` that is not ignored gives its row a NaN loss and NaN gradients:
///   under the mean, the result and every gradient are NaN.
/// - Every row ignored under the mean gives NaN (0 / 0) and zero gradients, as PyTorch. An
///   ignored row has no loss and a zero gradient (NaN where its own logits are not finite, as
///   PyTorch's). An empty batch gives NaN (mean), 0 (sum) or `[0]` (none, untracked); its
///   gradients are zero.
///
/// # Panics
/// As [`linear_relu_cross_entropy`], and on class weights that are not `[C]` or not finite,
/// or a smoothing outside `[0, 1]`.
pub fn linear_relu_cross_entropy_loss<B: FusedHeadBackend, const D: usize, const DL: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, DL, Int>,
    loss: &HeadLoss,
    options: impl Into<HeadOptions>,
) -> Tensor<B, 1> {
    let op = "linear_relu_cross_entropy_loss";
    let options = options.into();
    let labels = rows_of_labels(op, &x, labels); // [B]
    let x = rows_of(op, x); // [B, I]
    validate::head_tensors(op, &x, &weight, &bias, Some(&labels));
    loss.check(op, weight.dims()[0]);
    let batch = x.dims()[0];
    if loss.is_plain() || (batch == 0 && loss.reduction == HeadReduction::Mean) {
        return linear_relu_cross_entropy_with(x, weight, bias, labels, options);
    }
    if batch == 0 {
        if loss.reduction == HeadReduction::None {
            return Tensor::empty([0], (&x.device(), x.dtype()));
        }
        // The sum over no row: 0, tracked (the op's gradients of an empty batch are zero).
        let nan = linear_relu_cross_entropy_with(x, weight, bias, labels, options);
        return nan.clone().mask_fill(nan.is_nan(), 0);
    }
    let out = B::linear_relu_cross_entropy_loss(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        labels.into_primitive(),
        loss,
        options,
    );
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// [`linear_relu_cross_entropy`] and the predicted class of each row, in one call (for metrics:
/// accuracy without a second pass over X). Returns the loss `[1]`, tracked on an
/// [`Autodiff`](burn::backend::Autodiff) backend exactly as the op's, and the predictions in
/// the labels' shape and int dtype: the argmax over C of `H` (the first class of the row's
/// largest value; a row with a NaN gets an unspecified class, its loss is NaN). At C > 32 on
/// the CubeCL backends they come from the streamed path's row kernel, with no `[B, C]` tensor;
/// elsewhere from the forward's Z. Checks, panics and edge cases as
/// [`linear_relu_cross_entropy`].
pub fn linear_relu_cross_entropy_and_predictions<
    B: FusedHeadBackend,
    const D: usize,
    const DL: usize,
>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, DL, Int>,
) -> (Tensor<B, 1>, Tensor<B, DL, Int>) {
    linear_relu_cross_entropy_and_predictions_with(x, weight, bias, labels, HeadOptions::new())
}

/// [`linear_relu_cross_entropy_and_predictions`] with [`HeadOptions`], as in
/// [`linear_relu_cross_entropy_with`].
pub fn linear_relu_cross_entropy_and_predictions_with<
    B: FusedHeadBackend,
    const D: usize,
    const DL: usize,
>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, DL, Int>,
    options: impl Into<HeadOptions>,
) -> (Tensor<B, 1>, Tensor<B, DL, Int>) {
    let op = "linear_relu_cross_entropy_and_predictions";
    let label_dims = labels.dims();
    let labels = rows_of_labels(op, &x, labels); // [B]
    let x = rows_of(op, x); // [B, I]
    validate::head_tensors(op, &x, &weight, &bias, Some(&labels));
    let (loss, predictions) = B::linear_relu_cross_entropy_and_predictions(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        labels.into_primitive(),
        options.into(),
    );
    let predictions = Tensor::<B, 1, Int>::from_primitive(predictions); // [B]
    (
        Tensor::from_primitive(TensorPrimitive::Float(loss)),
        predictions.reshape(label_dims),
    )
}

/// The head's output `H = ReLU(X W^T + b)`, `[B, C]` (X's leading dims, then C), in exact f32
/// (for prediction: the argmax of H is the predicted class). Checks and panics as
/// [`linear_relu_cross_entropy`].
///
/// On an inner backend (no autodiff) this runs the op's kernels (C <= 32: one pass over X with
/// the small-C forward's layout; C > 32: the tiled forward product); on an `Autodiff` backend
/// it runs stock ops, which autodiff differentiates as usual.
pub fn linear_relu_logits<B: FusedHeadBackend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
) -> Tensor<B, D> {
    linear_relu_logits_with(x, weight, bias, HeadOptions::new())
}

/// [`linear_relu_logits`] with [`HeadOptions`], as in [`linear_relu_cross_entropy_with`]:
/// `HeadPrecision::Tf32` allows TF32 tensor cores for the product where the device has them
/// and C > 32 (elsewhere, and on an `Autodiff` backend, it runs exact);
/// `HeadActivation::Identity` returns `X W^T + b` itself.
pub fn linear_relu_logits_with<B: FusedHeadBackend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    options: impl Into<HeadOptions>,
) -> Tensor<B, D> {
    let op = "linear_relu_logits";
    let mut out_dims = x.dims();
    out_dims[D - 1] = weight.dims()[0];
    let x = rows_of(op, x); // [B, I]
    validate::head_tensors(op, &x, &weight, &bias, None);
    let h = B::head_logits(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        options.into(),
    );
    let h = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(h)); // [B, C]
    if D == 2 {
        Tensor::from_primitive(h.into_primitive())
    } else {
        h.reshape(out_dims)
    }
}

/// X `[d0, .., dk, I]` as its rows `[d0 .. dk, I]` (rank 2 as it is).
fn rows_of<B: FusedHeadBackend, const D: usize>(op: &str, x: Tensor<B, D>) -> Tensor<B, 2> {
    if D < 2 {
        validate::fail_rank(
            op,
            "X must be [.., I] with at least one leading dim",
            &x.dims(),
        );
    }
    if D == 2 {
        return Tensor::from_primitive(x.into_primitive());
    }
    let dims = x.dims();
    let rows = dims[..D - 1].iter().product::<usize>();
    x.reshape([rows, dims[D - 1]])
}

/// Labels `[d0, .., dk]` of X `[d0, .., dk, I]` as `[d0 .. dk]`; panics naming both shapes
/// when they do not match (rank 2 and 1 pass as they are, checked with the other inputs).
fn rows_of_labels<B: FusedHeadBackend, const D: usize, const DL: usize>(
    op: &str,
    x: &Tensor<B, D>,
    labels: Tensor<B, DL, Int>,
) -> Tensor<B, 1, Int> {
    if D == 2 && DL == 1 {
        return Tensor::from_primitive(labels.into_primitive());
    }
    let (x_dims, label_dims) = (x.dims(), labels.dims());
    let leading = &x_dims[..D.saturating_sub(1)];
    if D < 2 || leading != &label_dims[..] {
        validate::fail_rank(
            op,
            &format!("labels must be {leading:?}, the leading dims of X {x_dims:?}"),
            &label_dims,
        );
    }
    labels.reshape([label_dims.iter().product::<usize>()])
}

/// A label outside `[0, C)`, found by [`validate_labels`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelError {
    /// Row of the first bad label.
    pub row: usize,
    /// Its value.
    pub label: i64,
    /// The number of classes C.
    pub classes: usize,
    /// How many labels are outside `[0, C)`.
    pub count: usize,
}

impl core::fmt::Display for LabelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} label(s) outside [0, {}); the first is labels[{}] = {}",
            self.count, self.classes, self.row, self.label
        )
    }
}

impl std::error::Error for LabelError {}

/// Checks that every label is in `[0, classes)`, for callers who want an error rather than the
/// op's NaN loss on a bad row. Reads the labels back to the host (a device sync).
pub fn validate_labels<B: burn::tensor::backend::Backend>(
    labels: &Tensor<B, 1, Int>,
    classes: usize,
) -> Result<(), LabelError> {
    let data = labels.to_data().convert::<i64>();
    let values = data.as_slice::<i64>().expect("labels converted to i64");
    let bad = |v: &i64| *v < 0 || *v >= classes as i64;
    match values.iter().position(bad) {
        None => Ok(()),
        Some(row) => Err(LabelError {
            row,
            label: values[row],
            classes,
            count: values.iter().filter(|v| bad(v)).count(),
        }),
    }
}
