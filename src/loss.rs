//! Cross-entropy options with PyTorch's semantics: ignored rows, class weights, label smoothing
//! and the three reductions ([`HeadLoss`]), and the stock-op algebra every path shares.
//!
//! For a row r with label y, log-probabilities `lp = log_softmax(H[r])`, class weights w (ones
//! without), smoothing e and C classes, PyTorch's `cross_entropy` computes
//!
//! ```text
//! L[r] = (1 - e) w[y] (-lp[y]) + (e / C) sum_c w[c] (-lp[c])       (0 for an ignored row)
//! mean = sum_r L[r] / sum_r w[y_r]   (over the rows not ignored)   sum = sum_r L[r]   none = L
//! dL[r]/dH[r] = (1 - e) w[y] (p - onehot(y)) + (e / C) (sum_c w[c] p - w)
//! ```
//!
//! Without smoothing, `dL[r]/dH[r] = w[y] (p - onehot(y))`: the unweighted row gradient scaled
//! by one number per row. That is what the streamed path (C > 32 on the CubeCL backends) runs,
//! with a row weight `rho[r]` in its row kernel (`w[y] / sum w` for the mean, `w[y]` for the
//! sum, `w[y] g[r]` for the backward step of `none`). Label smoothing needs every class's
//! weight in the row, so it runs the materialized path: the fast path's logits Z, the algebra
//! above in stock ops on `[B, C]`, and the fast path's backward kernels.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Bool, DType, Int, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::backend::{FusedHeadBackend, HeadActivation, HeadGradients, HeadOptions, HeadWanted};

/// How the per-row losses become the result: PyTorch's `reduction`.
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadReduction {
    /// `sum_r L[r] / sum_r w[y_r]` over the rows that are not ignored (the plain mean over
    /// those rows without class weights), `[1]`. Every row ignored gives NaN (0 / 0), as PyTorch.
    Mean,
    /// `sum_r L[r]`, `[1]`.
    Sum,
    /// `L` itself, one loss per row (0 for an ignored row), `[B]`.
    None,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadReduction {
    fn default() -> Self {
        Self::Mean
    }
}

/// The cross-entropy options of Burn's `CrossEntropyLossConfig` and PyTorch's `cross_entropy`,
/// with PyTorch's semantics (see [`HeadReduction`] and the formula in
/// [`crate::linear_relu_cross_entropy_loss`]):
///
/// ```
/// use burn_fused_head::{HeadLoss, HeadReduction};
/// let loss = HeadLoss::new()
///     .with_ignore_index(Some(-100))
///     .with_weights(Some(vec![1.0, 2.0, 0.5]))
///     .with_smoothing(Some(0.1))
///     .with_reduction(HeadReduction::Sum);
/// assert!(!loss.is_plain());
/// assert!(HeadLoss::new().is_plain());
/// ```
///
/// An ignored row (its label is `ignore_index` or one of `pad_tokens`) has no loss and no
/// gradient (a zero one; NaN where its own logits hold a NaN or an infinity, as PyTorch's) and
/// is left out of the mean's denominator, as PyTorch's `ignore_index`. Every row ignored
/// under the mean gives a NaN loss (0 / 0) and zero gradients, as PyTorch. (Burn
/// 0.21's own `CrossEntropyLoss` leaves pad rows in its denominator, Burn issue #5568; this
/// crate follows PyTorch so that the loss does not depend on how much padding a batch has.)
#[derive(burn::config::Config, Debug, PartialEq)]
pub struct HeadLoss {
    /// PyTorch's `ignore_index`: rows with this label are ignored (it may be outside
    /// `[0, C)`, as PyTorch's usual -100). Default: none.
    pub ignore_index: Option<i64>,
    /// Burn's `pad_tokens`: rows whose label is one of these classes are ignored. Default: none.
    pub pad_tokens: Option<Vec<usize>>,
    /// One weight per class, `[C]`, as PyTorch's `weight`: row r's loss is scaled by
    /// `weights[labels[r]]` and the mean divides by the sum of those. Default: all 1.
    pub weights: Option<Vec<f32>>,
    /// Label smoothing e in `[0, 1]`: the target is `(1 - e) onehot + e / C`, as PyTorch's
    /// `label_smoothing`. Default: none (0).
    pub smoothing: Option<f32>,
    /// See [`HeadReduction`]. Default: the mean.
    #[config(default = "HeadReduction::Mean")]
    pub reduction: HeadReduction,
}

impl Default for HeadLoss {
    fn default() -> Self {
        Self::new()
    }
}

impl HeadLoss {
    /// Whether these are the op's own semantics (no ignored label, no class weights, no
    /// smoothing, the mean): then [`crate::linear_relu_cross_entropy_loss`] runs
    /// [`crate::linear_relu_cross_entropy_with`], bit for bit.
    pub fn is_plain(&self) -> bool {
        self.ignore_index.is_none()
            && self.pad_tokens.as_ref().is_none_or(|t| t.is_empty())
            && self.weights.is_none()
            && self.smoothing.is_none_or(|e| e == 0.0)
            && self.reduction == HeadReduction::Mean
    }

    /// Label smoothing e, 0 without.
    pub(crate) fn epsilon(&self) -> f64 {
        self.smoothing.unwrap_or(0.0) as f64
    }

    /// Panics, naming `op`, on weights that are not `[C]` or not finite, or a smoothing outside
    /// `[0, 1]`.
    pub(crate) fn check(&self, op: &str, classes: usize) {
        if let Some(w) = &self.weights {
            assert!(
                w.len() == classes,
                "{op}: HeadLoss::weights has {} values; it must have one per class, C = {classes}",
                w.len()
            );
            assert!(
                w.iter().all(|v| v.is_finite()),
                "{op}: HeadLoss::weights must be finite"
            );
        }
        if let Some(e) = self.smoothing {
            assert!(
                (0.0..=1.0).contains(&e),
                "{op}: HeadLoss::smoothing must be in [0, 1], got {e}"
            );
        }
    }
}

/// The per-row terms of a batch's labels under [`HeadLoss`], on the labels' device, in the
/// dtype the losses are summed in ([`sums_dtype`]).
#[derive(Debug, Clone)]
pub(crate) struct Rows<B: Backend> {
    /// The labels with every ignored row's mapped to class 0 (so a kernel reads an index in
    /// range there); a label outside `[0, C)` that is not ignored stays as it is.
    pub labels: Tensor<B, 1, Int>,
    /// `w[y]` per row (1 without class weights), 0 for an ignored row, NaN for a label
    /// outside `[0, C)` that is not ignored.
    pub weight: Tensor<B, 1>,
    /// Which rows are ignored.
    pub ignored: Tensor<B, 1, Bool>,
    /// 0 for an ignored row, else 1.
    pub keep: Tensor<B, 1>,
}

/// f64 for f64 inputs, else f32: the dtype of the per-row losses and their sums (the
/// half-precision inputs' losses are summed in f32, as the op's own).
pub(crate) fn sums_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// [`Rows`] of `labels` `[B]` for C = `classes`.
pub(crate) fn rows<B: Backend>(
    labels: IntTensor<B>,
    loss: &HeadLoss,
    classes: usize,
    dtype: DType,
) -> Rows<B> {
    let labels = Tensor::<B, 1, Int>::from_primitive(labels); // [B]
    let device = labels.device();
    let batch = labels.dims()[0];
    let tokens = loss.pad_tokens.iter().flatten().map(|&t| t as i64);
    let ignored = loss
        .ignore_index
        .into_iter()
        .chain(tokens)
        .map(|value| labels.clone().equal_elem(value))
        .reduce(|a, b| a.bool_or(b))
        .unwrap_or_else(|| labels.clone().equal(labels.clone()).bool_not()); // [B], none
    let outside = labels
        .clone()
        .lower_elem(0)
        .bool_or(labels.clone().greater_equal_elem(classes as i64));
    let invalid = outside.clone().bool_and(ignored.clone().bool_not());
    let labels = labels.mask_fill(ignored.clone(), 0); // [B]
    let weight = match &loss.weights {
        Some(w) => {
            let w = Tensor::<B, 1>::from_data(
                TensorData::new(w.clone(), [classes]).convert_dtype(dtype),
                (&device, dtype),
            ); // [C]
            w.gather(0, labels.clone().mask_fill(outside, 0))
        }
        None => Tensor::<B, 1>::ones([batch], (&device, dtype)),
    }; // [B]
    let weight = weight
        .mask_fill(ignored.clone(), 0)
        .mask_fill(invalid, f64::NAN);
    let keep = Tensor::<B, 1>::ones([batch], (&device, dtype)).mask_fill(ignored.clone(), 0);
    Rows {
        labels,
        weight,
        ignored,
        keep,
    }
}

/// The default of [`FusedHeadBackend::head_row_losses`], in stock ops: the loss rows `L`
/// `[B]` (in [`sums_dtype`]) and their gradients `G = dL[r]/dH[r]` `[B, C]` (in Z's dtype) of
/// `H = act(Z)`, the algebra of this module's documentation. `labels`, `row_weight` (`w[y]`)
/// and `keep` (0 for an ignored row, else 1) are [`Rows`]'s; `class_weights` `[C]` and
/// `smoothing` are [`HeadLoss`]'s. An ignored row's L is 0 and its G is 0 (NaN where its
/// logits are not finite, as PyTorch's); a row whose label is outside `[0, C)` (not ignored:
/// its weight is NaN) gets NaN in both.
pub(crate) fn row_losses<B: Backend>(
    z: FloatTensor<B>,
    labels: IntTensor<B>,
    [row_weight, keep]: [FloatTensor<B>; 2],
    class_weights: Option<FloatTensor<B>>,
    smoothing: f32,
    activation: HeadActivation,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let float1 = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
    let z = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(z)); // [B, C]
    let z_dtype = z.dtype();
    let dtype = sums_dtype(z_dtype);
    let z = z.cast(dtype);
    let h = match activation {
        // `Z <= 0 -> 0`, which keeps a NaN (as the op's ReLU).
        HeadActivation::Relu => z.clone().mask_fill(z.lower_equal_elem(0), 0),
        HeadActivation::Identity => z,
    }; // [B, C]
    let [batch, classes] = h.dims();
    let device = h.device();
    let e = smoothing as f64;
    let w_y = float1(row_weight).unsqueeze_dim::<2>(1); // [B, 1]
    let keep = float1(keep).unsqueeze_dim::<2>(1); // [B, 1]
    let ignored = keep.clone().equal_elem(0); // [B, 1]
    let target = Tensor::<B, 1, Int>::from_primitive(labels)
        .unsqueeze_dim::<2>(1)
        .mask_fill(w_y.clone().is_nan(), 0); // [B, 1], every index in range

    let m = h.clone().detach().max_dim(1); // [B, 1]
    let shifted = h - m; // [B, C]
    let exp = shifted.clone().exp(); // [B, C]
    let d = exp.clone().sum_dim(1); // [B, 1]
    let lse = d.clone().log(); // [B, 1]
    let p = exp / d; // [B, C]
    let nll = lse.clone() - shifted.clone().gather(1, target.clone()); // [B, 1]
    let onehot = Tensor::<B, 2>::zeros([batch, classes], (&device, dtype)).scatter(
        1,
        target,
        Tensor::ones([batch, 1], (&device, dtype)),
        burn::tensor::IndexingUpdateOp::Add,
    ); // [B, C]
    let mut l = nll * w_y.clone() * (1.0 - e); // [B, 1]
    let mut g = (p.clone() - onehot) * w_y * (1.0 - e); // [B, C]
    if e > 0.0 {
        // The smoothing term of every row not ignored: (e / C) sum_c w[c] (-lp[c]).
        let w = match class_weights {
            Some(w) => float1(w).cast(dtype),
            None => Tensor::<B, 1>::ones([classes], (&device, dtype)),
        }; // [C]
        let total = w.clone().sum().unsqueeze_dim::<2>(1); // [1, 1]
        let w = w.unsqueeze_dim::<2>(0); // [1, C]
        let smooth = lse * total.clone() - (shifted * w.clone()).sum_dim(1); // [B, 1]
        let scale = keep * (e / classes as f64); // [B, 1]
        l = l + smooth * scale.clone();
        g = g + (p * total - w) * scale;
    }
    // An ignored row's G is `0 (p - onehot)`: 0, or NaN where its logits hold a NaN or an
    // infinity, as PyTorch's (and the streamed path's) gradient; its loss is 0 whatever they hold.
    let l = l.mask_fill(ignored, 0).squeeze_dim::<1>(1); // [B]
    (
        l.into_primitive().tensor(),
        g.cast(z_dtype).into_primitive().tensor(),
    )
}

/// The reduction of the loss rows `L` `[B]`: the mean over `sum_r w[y_r]` (`denominator`),
/// the sum, or `L` itself.
pub(crate) fn reduce<B: Backend>(
    l: Tensor<B, 1>,
    denominator: Option<Tensor<B, 1>>,
    reduction: HeadReduction,
) -> Tensor<B, 1> {
    match reduction {
        HeadReduction::Mean => l.sum() / denominator.expect("the mean's denominator"),
        HeadReduction::Sum => l.sum(),
        HeadReduction::None => l,
    }
}

/// The mean's denominator `sum_r w[y_r]` `[1]` (NaN where a label is outside `[0, C)` and not
/// ignored), or `None` for the other reductions.
pub(crate) fn denominator<B: Backend>(rows: &Rows<B>, loss: &HeadLoss) -> Option<Tensor<B, 1>> {
    (loss.reduction == HeadReduction::Mean).then(|| rows.weight.clone().sum())
}

/// Whether `loss` runs on the streamed path of `B` for X `[batch, inputs]` and C classes:
/// where B computes the gradients in the forward pass, and without smoothing.
pub(crate) fn streams<B: FusedHeadBackend>(
    loss: &HeadLoss,
    batch: usize,
    inputs: usize,
    classes: usize,
) -> bool {
    loss.epsilon() == 0.0 && B::head_gradients_in_forward(batch, inputs, classes)
}

/// The materialized path's forward on `B`: Z `[B, C]` from the fast path's logits (exact or
/// TF32 as `options` says), then B's [`FusedHeadBackend::head_row_losses`]. Returns
/// `(Z, L [B], G [B, C])`, all in [`sums_dtype`]: half-precision inputs run in f32 (their
/// products exact), and the backward casts the gradients back to the inputs' dtype.
pub(crate) fn materialized<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    rows: &Rows<B>,
    loss: &HeadLoss,
    options: HeadOptions,
) -> (FloatTensor<B>, Tensor<B, 1>, FloatTensor<B>) {
    let dtype = x.dtype();
    let (x, weight, bias) = (to_sums::<B>(x), to_sums::<B>(weight), to_sums::<B>(bias));
    let logits = for_sums(options, dtype).with_activation(HeadActivation::Identity);
    let z = B::head_logits(x, weight, bias, logits); // [B, C], in the sums' dtype
    let class_weights = loss.weights.as_ref().map(|w| {
        let (device, dtype) = (rows.weight.device(), rows.weight.dtype());
        let data = TensorData::new(w.clone(), [w.len()]).convert_dtype(dtype);
        Tensor::<B, 1>::from_data(data, (&device, dtype))
            .into_primitive()
            .tensor()
    });
    let (l, g) = B::head_row_losses(
        z.clone(),
        rows.labels.clone().into_primitive(),
        [rows.weight.clone(), rows.keep.clone()].map(|t| t.into_primitive().tensor()),
        class_weights,
        loss.smoothing.unwrap_or(0.0),
        options.activation,
    );
    let l = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(l));
    (z, l, g)
}

/// The materialized path's backward: `dH = G u` with `u` `[B]` (each row's upstream
/// gradient), then B's fused backward with an upstream gradient of 1.
pub(crate) fn materialized_backward<B: FusedHeadBackend>(
    [x, weight, z]: [FloatTensor<B>; 3],
    g: FloatTensor<B>,
    u: Tensor<B, 1>,
    wanted: HeadWanted,
    options: HeadOptions,
) -> HeadGradients<B> {
    let g = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(g)); // [B, C]
    let (device, dtype) = (g.device(), g.dtype());
    let dh = if g.shape().num_elements() == 0 {
        g
    } else {
        g * u.cast(dtype).unsqueeze_dim::<2>(1)
    }; // [B, C]
    let one = Tensor::<B, 1>::ones([1], (&device, dtype));
    let input_dtype = x.dtype();
    let grads = B::head_backward(
        to_sums::<B>(x),
        to_sums::<B>(weight),
        z,
        dh.into_primitive().tensor(),
        one.into_primitive().tensor(),
        wanted,
        for_sums(options, input_dtype),
    );
    let back = |t: FloatTensor<B>| {
        let rank = t.shape().num_dims();
        let t = TensorPrimitive::Float(t);
        match rank {
            1 => Tensor::<B, 1>::from_primitive(t)
                .cast(input_dtype)
                .into_primitive(),
            _ => Tensor::<B, 2>::from_primitive(t)
                .cast(input_dtype)
                .into_primitive(),
        }
        .tensor()
    };
    HeadGradients {
        x: grads.x.map(back),
        weight: grads.weight.map(back),
        bias: grads.bias.map(back),
    }
}

/// A float primitive in [`sums_dtype`] (f32 for half-precision inputs; as it is otherwise):
/// the materialized path computes in it, so nothing `[B, C]` is rounded to a half type.
fn to_sums<B: Backend>(t: FloatTensor<B>) -> FloatTensor<B> {
    let (dtype, rank) = (t.dtype(), t.shape().num_dims());
    if sums_dtype(dtype) == dtype {
        return t;
    }
    let t = TensorPrimitive::Float(t);
    match rank {
        1 => Tensor::<B, 1>::from_primitive(t)
            .cast(sums_dtype(dtype))
            .into_primitive(),
        _ => Tensor::<B, 2>::from_primitive(t)
            .cast(sums_dtype(dtype))
            .into_primitive(),
    }
    .tensor()
}

/// `options` for the materialized path on inputs of `dtype`: exact products for half-precision
/// inputs (as the op's own f32 fallback for them), as they are otherwise.
fn for_sums(options: HeadOptions, dtype: DType) -> HeadOptions {
    if sums_dtype(dtype) == dtype {
        options
    } else {
        options.with_precision(crate::HeadPrecision::Exact)
    }
}

/// Each row's upstream gradient `u` `[B]` for the upstream gradient `grad` of the result
/// (`[1]`, or `[B]` for [`HeadReduction::None`]): `g / denominator`, `g` or `g[r]`.
pub(crate) fn row_upstream<B: Backend>(
    grad: Tensor<B, 1>,
    denominator: Option<Tensor<B, 1>>,
    reduction: HeadReduction,
    batch: usize,
) -> Tensor<B, 1> {
    let dtype = denominator.as_ref().map_or(grad.dtype(), |d| d.dtype());
    let grad = grad.cast(dtype);
    match reduction {
        HeadReduction::Mean => {
            (grad / denominator.expect("the mean's denominator")).expand([batch])
        }
        HeadReduction::Sum => grad.expand([batch]),
        HeadReduction::None => grad,
    }
}

/// The result of `loss` without gradients on `B` (an inner backend, or an untracked call):
/// the streamed path's per-row losses where it runs, else the materialized forward.
pub(crate) fn forward_only<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    labels: IntTensor<B>,
    loss: &HeadLoss,
    options: HeadOptions,
) -> FloatTensor<B> {
    let classes = weight.shape()[0];
    let rows = rows::<B>(labels, loss, classes, sums_dtype(x.dtype()));
    let denominator = denominator(&rows, loss);
    forward_with_rows::<B>([x, weight, bias], &rows, denominator, loss, options)
}

/// [`forward_only`] from the labels' [`Rows`] and the mean's denominator, already made.
pub(crate) fn forward_with_rows<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    rows: &Rows<B>,
    denominator: Option<Tensor<B, 1>>,
    loss: &HeadLoss,
    options: HeadOptions,
) -> FloatTensor<B> {
    let (dtype, [batch, inputs]) = (x.dtype(), dims2(&x.shape()));
    let classes = weight.shape()[0];
    let l = if streams::<B>(loss, batch, inputs, classes) {
        let (l, _) = B::head_rows_loss_and_gradients(
            x,
            weight,
            bias,
            rows.labels.clone().into_primitive(),
            rows.weight.clone().into_primitive().tensor(),
            HeadWanted::NONE,
            options,
        );
        weighted_rows(l, rows)
    } else {
        materialized::<B>([x, weight, bias], rows, loss, options).1
    };
    let out = reduce(l, denominator, loss.reduction);
    out.cast(dtype).into_primitive().tensor()
}

/// `L = w[y] l` `[B]` from the streamed path's unweighted per-row losses `l`, 0 where ignored
/// (whatever the row's logits).
pub(crate) fn weighted_rows<B: Backend>(l: FloatTensor<B>, rows: &Rows<B>) -> Tensor<B, 1> {
    let l = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(l)).cast(rows.weight.dtype());
    (l * rows.weight.clone()).mask_fill(rows.ignored.clone(), 0)
}

/// The default of [`FusedHeadBackend::head_rows_loss_and_gradients`]: the materialized path
/// with `rho` as each row's weight (no class weight, no smoothing, nothing ignored).
pub(crate) fn rows_loss_and_gradients<B: FusedHeadBackend>(
    inputs: [FloatTensor<B>; 3],
    labels: IntTensor<B>,
    rho: FloatTensor<B>,
    wanted: HeadWanted,
    options: HeadOptions,
) -> (FloatTensor<B>, HeadGradients<B>) {
    let [x, weight, bias] = inputs;
    let dtype = x.dtype();
    let classes = weight.shape()[0];
    let plain = HeadLoss::new();
    let rows = rows::<B>(labels, &plain, classes, sums_dtype(dtype));
    let (z, l, g) = materialized::<B>([x.clone(), weight.clone(), bias], &rows, &plain, options);
    if !wanted.any() {
        return (l.into_primitive().tensor(), HeadGradients::none());
    }
    let rho = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(rho));
    let grads = materialized_backward::<B>([x, weight, z], g, rho, wanted, options);
    (l.into_primitive().tensor(), grads)
}

/// `[rows, cols]` of a rank-2 shape.
fn dims2(shape: &burn::tensor::Shape) -> [usize; 2] {
    [shape[0], shape[1]]
}
