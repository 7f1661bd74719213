//! The backend extension trait. Default bodies are stock Burn tensor ops, so every Burn backend
//! runs the op; `NdArray<f64>` running these bodies is the crate's independent reference.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorMetadata, TensorPrimitive};

/// What the forward pass keeps for the backward pass.
#[derive(Debug, Clone)]
pub struct HeadForward<B: Backend> {
    /// Mean cross-entropy over the batch, `[1]`.
    pub loss: FloatTensor<B>,
    /// Pre-activation `Z = X W^T + b`, `[B, C]`: the ReLU mask of the backward pass (unused by
    /// the identity's).
    pub z: FloatTensor<B>,
    /// `dH = (softmax(H) - onehot(labels)) / B`, `[B, C]`, for a unit upstream gradient.
    pub dh: FloatTensor<B>,
}

/// Which gradients a backward pass must produce: those of the tracked inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadWanted {
    /// dX `[B, I]`.
    pub x: bool,
    /// dW `[C, I]`.
    pub weight: bool,
    /// db `[C]`.
    pub bias: bool,
}

impl HeadWanted {
    /// Every gradient: dX, dW and db.
    pub const ALL: Self = Self {
        x: true,
        weight: true,
        bias: true,
    };

    /// No gradient: the loss alone.
    pub const NONE: Self = Self {
        x: false,
        weight: false,
        bias: false,
    };

    /// Whether any gradient is wanted.
    pub fn any(self) -> bool {
        self.x || self.weight || self.bias
    }
}

/// The gradients of one backward pass, scaled by the upstream gradient; `None` where not
/// wanted (see [`HeadWanted`]).
#[derive(Debug, Clone)]
pub struct HeadGradients<B: Backend> {
    /// dX = dZ W, `[B, I]`.
    pub x: Option<FloatTensor<B>>,
    /// dW = dZ^T X, `[C, I]`.
    pub weight: Option<FloatTensor<B>>,
    /// db = column_sum(dZ), `[C]`.
    pub bias: Option<FloatTensor<B>>,
}

/// How the large-C products (C > 32 on the CubeCL backends) are computed.
///
/// `Exact` (the default) is f32 with FMA throughout and passes the seed's gates against the f64
/// reference. `Tf32` allows TF32 tensor cores: each operand of the three products
/// (`X W^T`, `dZ^T X`, `dZ W`) is rounded to TF32 (10-bit mantissa, round to nearest, ties to
/// even), multiplied exactly and summed in f32. It is a permission, as PyTorch's
/// `allow_tf32`: where the device has no TF32 tensor cores
/// ([`FusedHeadBackend::head_tf32_available`] is false), and on the small-C path (memory-bound,
/// where tensor cores gain nothing), the op runs exact f32.
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadPrecision {
    /// f32 with FMA: the seed's gates hold against the f64 reference.
    Exact,
    /// TF32 tensor cores for the large-C products where the device has them.
    Tf32,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadPrecision {
    fn default() -> Self {
        Self::Exact
    }
}

/// The activation between the linear layer and the softmax: `H = act(X W^T + b)`.
///
/// `Relu` (the default) is the seed's model. `Identity` applies the cross-entropy to the
/// logits `X W^T + b` themselves, as Burn's `Linear` + `CrossEntropyLoss`, PyTorch's
/// `cross_entropy(linear(x))` and every LM head do. Each kernel is compiled once per
/// activation (a compile-time choice inside it, no per-element branch).
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadActivation {
    /// `H = ReLU(Z)`; `dZ = dH [Z > 0]`.
    Relu,
    /// `H = Z`; `dZ = dH`.
    Identity,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadActivation {
    fn default() -> Self {
        Self::Relu
    }
}

/// How the op computes: the precision of the large-C products and the activation. The
/// public functions take anything that converts into it, so a bare [`HeadPrecision`] (with
/// ReLU) or a bare [`HeadActivation`] (exact) works as well as the whole struct:
///
/// ```
/// use burn_fused_head::{HeadActivation, HeadOptions, HeadPrecision};
/// let options = HeadOptions::new()
///     .with_precision(HeadPrecision::Tf32)
///     .with_activation(HeadActivation::Identity);
/// assert_eq!(HeadOptions::from(HeadPrecision::Tf32).activation, HeadActivation::Relu);
/// # let _ = options;
/// ```
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub struct HeadOptions {
    /// See [`HeadPrecision`]. Default: exact f32.
    #[config(default = "HeadPrecision::Exact")]
    pub precision: HeadPrecision,
    /// See [`HeadActivation`]. Default: ReLU.
    #[config(default = "HeadActivation::Relu")]
    pub activation: HeadActivation,
}

impl Default for HeadOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl From<HeadPrecision> for HeadOptions {
    fn from(precision: HeadPrecision) -> Self {
        Self::new().with_precision(precision)
    }
}

impl From<HeadActivation> for HeadOptions {
    fn from(activation: HeadActivation) -> Self {
        Self::new().with_activation(activation)
    }
}

impl HeadOptions {
    /// Whether the activation is ReLU (the kernels' compile-time flag).
    #[cfg(feature = "cube")]
    pub(crate) fn relu(self) -> bool {
        self.activation == HeadActivation::Relu
    }
}

/// What a backend's implementation of the op accepts, checked before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLimits {
    /// Float dtypes the implementation runs; `None` means whatever the backend's stock ops run.
    pub float_dtypes: Option<&'static [DType]>,
    /// The largest element count of any one tensor (X, W, Z, dX...) the implementation indexes
    /// correctly. The CubeCL kernels use 32-bit addressing.
    pub max_elements: usize,
}

/// A Burn backend that runs the fused classifier head.
///
/// Shapes: X `[B, I]`, W `[C, I]`, b `[C]`, labels `[B]` (integers in `[0, C)`), H, Z, dH, dZ `[B, C]`.
/// Each stage has a default body built from stock Burn ops; a backend with kernels overrides the
/// seven primitive stages (the six of the seed plus [`head_mean_loss`](Self::head_mean_loss)),
/// and the composite methods follow. Shapes are validated by the public functions
/// ([`crate::linear_relu_cross_entropy`]); calling these methods directly skips that step.
pub trait FusedHeadBackend: Backend {
    /// What this implementation accepts (dtypes, sizes).
    fn head_limits() -> HeadLimits {
        HeadLimits {
            float_dtypes: None,
            max_elements: usize::MAX,
        }
    }

    /// Whether [`HeadPrecision::Tf32`] runs on TF32 tensor cores on `device`. The default (stock
    /// ops) is false: they run exact.
    fn head_tf32_available(device: &Self::Device) -> bool {
        let _ = device;
        false
    }

    /// Stage 1: `Z = X W^T + b`, `H = ReLU(Z)`; returns `(Z, H)`, both `[B, C]`.
    fn head_linear_relu_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let x = float::<Self, 2>(x); // [B, I]
        let weight = float::<Self, 2>(weight); // [C, I]
        let bias = float::<Self, 1>(bias); // [C]
        let [batch, inputs] = x.dims();
        let classes = weight.dims()[0];
        if batch * classes == 0 {
            let z = zeros_or_empty::<Self, 2>([batch, classes], &x); // [B, C], no element
            return (prim(z.clone()), prim(z));
        }
        // Some stock matmuls divide by a zero dimension: an empty product is zeros.
        let xw = if inputs == 0 {
            zeros_or_empty::<Self, 2>([batch, classes], &x)
        } else {
            x.matmul(weight.transpose())
        }; // [B, C]
        let z = xw + bias.unsqueeze_dim(0); // [B, C]
        // ReLU as `Z <= 0 -> 0`, which keeps a NaN: NdArray's own `relu` maps NaN to 0.
        let h = z.clone().mask_fill(z.clone().lower_equal_elem(0), 0); // [B, C]
        (prim(z), prim(h))
    }

    /// The head's output `H = act(X W^T + b)` `[B, C]` alone, without the loss: what
    /// [`crate::linear_relu_logits_with`] runs. The default is stage 1
    /// ([`head_linear_relu_forward`](Self::head_linear_relu_forward)), its H for ReLU and its Z
    /// for the identity, exact whatever the precision; the CubeCL backends run the fast path's
    /// forward kernels without the loss (C <= 32: one pass over X; C > 32: the tiled product,
    /// on TF32 tensor cores with [`HeadPrecision::Tf32`] where the device has them).
    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: HeadOptions,
    ) -> FloatTensor<Self> {
        let (z, h) = Self::head_linear_relu_forward(x, weight, bias);
        match options.activation {
            HeadActivation::Relu => h,
            HeadActivation::Identity => z,
        }
    }

    /// Stage 2: stable softmax cross-entropy; returns `(loss_rows [B], dH [B, C])` with
    /// `loss_rows[r] = ln(sum_j exp(H[r,j] - m)) - (H[r,label] - m)`, `m = max_j H[r,j]`, and
    /// `dH = (p - onehot) / B` from the same probabilities. A row whose label is outside
    /// `[0, C)` gets a NaN loss and a NaN dH row.
    fn head_softmax_cross_entropy(
        h: FloatTensor<Self>,
        labels: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let h = float::<Self, 2>(h); // [B, C]
        let labels = Tensor::<Self, 1, Int>::from_primitive(labels); // [B]
        let [batch, classes] = h.dims();
        if batch == 0 {
            let device = h.device();
            let dtype = h.dtype();
            let loss = Tensor::<Self, 1>::empty([0], (&device, dtype));
            return (prim(loss), prim(h));
        }
        let invalid = labels
            .clone()
            .lower_elem(0)
            .bool_or(labels.clone().greater_equal_elem(classes as i64)); // [B]
        let target = labels.mask_fill(invalid.clone(), 0).unsqueeze_dim::<2>(1); // [B, 1]

        let m = h.clone().detach().max_dim(1); // [B, 1]
        let shifted = h - m; // [B, C]
        let e = shifted.clone().exp(); // [B, C]
        let d = e.clone().sum_dim(1); // [B, 1]
        let picked = shifted.gather(1, target.clone()); // [B, 1]
        let loss = (d.clone().log() - picked).squeeze_dim::<1>(1); // [B]
        let loss = loss.mask_fill(invalid.clone(), f64::NAN);

        let onehot = Tensor::<Self, 2>::zeros([batch, classes], (&e.device(), e.dtype())).scatter(
            1,
            target,
            Tensor::ones([batch, 1], (&e.device(), e.dtype())),
            burn::tensor::IndexingUpdateOp::Add,
        ); // [B, C]
        let dh = (e / d - onehot) / batch as f64; // [B, C]
        let dh = dh.mask_fill(
            invalid.unsqueeze_dim::<2>(1).expand([batch, classes]),
            f64::NAN,
        );
        (prim(loss), prim(dh))
    }

    /// Stage 3: `dZ = dH [Z > 0] g`, `[B, C]`; `g` `[1]` is the upstream gradient of the loss.
    /// The subgradient at `Z = 0` is 0; a NaN Z lets the (NaN) gradient through.
    fn head_relu_backward(
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let z = float::<Self, 2>(z); // [B, C]
        let dh = float::<Self, 2>(dh); // [B, C]
        if dh.shape().num_elements() == 0 {
            return prim(dh); // [0, C]: nothing to mask
        }
        let g = float::<Self, 1>(grad_loss).unsqueeze_dim::<2>(0); // [1, 1]
        prim(dh.mask_fill(z.lower_equal_elem(0), 0) * g)
    }

    /// Stage 4: `dW = dZ^T X`, `[C, I]`, stored like W.
    fn head_weight_gradient(dz: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        let dz = float::<Self, 2>(dz); // [B, C]
        let x = float::<Self, 2>(x); // [B, I]
        let ([batch, classes], inputs) = (dz.dims(), x.dims()[1]);
        if batch * classes * inputs == 0 {
            return prim(zeros_or_empty::<Self, 2>([classes, inputs], &x)); // the empty sum
        }
        prim(dz.transpose().matmul(x)) // [C, I]
    }

    /// Stage 5: `db = column_sum(dZ)`, `[C]`.
    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        let dz = float::<Self, 2>(dz); // [B, C]
        let [batch, classes] = dz.dims();
        if batch == 0 {
            return prim(zeros_or_empty::<Self, 1>([classes], &dz)); // the sum over no rows
        }
        prim(dz.sum_dim(0).squeeze_dim::<1>(0)) // [C]
    }

    /// Stage 6: `dX = dZ W`, `[B, I]`.
    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let dz = float::<Self, 2>(dz); // [B, C]
        let weight = float::<Self, 2>(weight); // [C, I]
        let ([batch, classes], inputs) = (dz.dims(), weight.dims()[1]);
        if batch * classes * inputs == 0 {
            return prim(zeros_or_empty::<Self, 2>([batch, inputs], &dz)); // the empty sum
        }
        prim(dz.matmul(weight)) // [B, I]
    }

    /// The batch mean of the per-row losses, `[1]`. An empty batch gives NaN (0 / 0), as
    /// PyTorch's mean over nothing.
    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        let loss_rows = float::<Self, 1>(loss_rows); // [B]
        let batch = loss_rows.dims()[0];
        if batch == 0 {
            let device = loss_rows.device();
            return prim(Tensor::<Self, 1>::full(
                [1],
                f64::NAN,
                (&device, loss_rows.dtype()),
            ));
        }
        prim(loss_rows.sum() / batch as f64) // [1]
    }

    /// The fused forward: stages 1 and 2 and the mean, keeping Z and dH for the backward pass.
    /// The default runs the stages one by one, exact whatever the precision; with
    /// [`HeadActivation::Identity`], stage 2 takes Z where it takes H.
    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        options: HeadOptions,
    ) -> HeadForward<Self> {
        let (z, h) = Self::head_linear_relu_forward(x, weight, bias); // [B, C] each
        let h = match options.activation {
            HeadActivation::Relu => h,
            HeadActivation::Identity => z.clone(),
        };
        let (loss_rows, dh) = Self::head_softmax_cross_entropy(h, labels); // [B], [B, C]
        HeadForward {
            loss: Self::head_mean_loss(loss_rows),
            z,
            dh,
        }
    }

    /// The fused backward: stages 3 to 6 from what [`head_forward`](Self::head_forward) kept,
    /// for the upstream gradient `grad_loss` `[1]`, producing only the wanted gradients.
    ///
    /// The default runs the stages one by one, exact whatever the precision (with
    /// [`HeadActivation::Identity`], `dZ = dH g` in place of stage 3); the CubeCL backends
    /// override this (and `head_forward`) with fused and tiled kernels, checked against the
    /// stages by the tests.
    fn head_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> HeadGradients<Self> {
        let dz = match options.activation {
            HeadActivation::Relu => Self::head_relu_backward(z, dh, grad_loss), // [B, C]
            HeadActivation::Identity => scaled::<Self>(dh, grad_loss),          // [B, C]
        };
        HeadGradients {
            weight: wanted
                .weight
                .then(|| Self::head_weight_gradient(dz.clone(), x)), // [C, I]
            bias: wanted.bias.then(|| Self::head_bias_gradient(dz.clone())), // [C]
            x: wanted.x.then(|| Self::head_input_gradient(dz, weight)),      // [B, I]
        }
    }

    /// Whether, for X `[batch, inputs]` and C = `classes`, the op computes the gradients in the
    /// forward pass ([`head_loss_and_gradients`](Self::head_loss_and_gradients)) rather than
    /// keep Z and dH for a backward pass. [`Autodiff`](burn::backend::Autodiff) asks this to
    /// choose. The default (stock ops) is false; the CubeCL backends say true for C > 32, where
    /// they stream the batch in chunks of rows and never hold a `[B, C]` tensor.
    fn head_gradients_in_forward(batch: usize, inputs: usize, classes: usize) -> bool {
        let _ = (batch, inputs, classes);
        false
    }

    /// The loss `[1]` and, for a unit upstream gradient, the wanted gradients, in one call
    /// (with [`HeadWanted::NONE`], the loss alone). [`Autodiff`](burn::backend::Autodiff) runs
    /// this in the forward pass where [`head_gradients_in_forward`](Self::head_gradients_in_forward)
    /// says so, and scales the gradients by the upstream gradient in its backward step: the
    /// loss is a scalar, so that is the exact gradient. A tracked call whose backward never
    /// runs still pays for the gradients.
    ///
    /// The default runs [`head_forward`](Self::head_forward), then, if any gradient is wanted,
    /// [`head_backward`](Self::head_backward) with an upstream gradient of 1.
    fn head_loss_and_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>) {
        let (loss, grads, _) =
            forward_then_backward::<Self>([x, weight, bias], labels, wanted, options, false);
        (loss, grads)
    }

    /// [`head_loss_and_gradients`](Self::head_loss_and_gradients), plus the predicted class of
    /// each row, `[B]` in the labels' int dtype: the argmax of `H = act(X W^T + b)`, the first
    /// class of the row's largest value (a row with a NaN gets an unspecified class; its loss is
    /// NaN). From the same pass: no second product.
    ///
    /// The default runs [`head_forward`](Self::head_forward), takes the argmax of its Z's
    /// activation with stock ops, then (if any gradient is wanted)
    /// [`head_backward`](Self::head_backward) with an upstream gradient of 1. The CubeCL
    /// backends at C > 32 find it in the streamed path's row kernel.
    fn head_loss_gradients_and_predictions(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>, IntTensor<Self>) {
        let (loss, grads, predictions) =
            forward_then_backward::<Self>([x, weight, bias], labels, wanted, options, true);
        (loss, grads, predictions.expect("predictions asked for"))
    }

    /// The loss `[1]` and the predicted class of each row `[B]`:
    /// [`head_loss_gradients_and_predictions`](Self::head_loss_gradients_and_predictions) with
    /// no gradient wanted. [`Autodiff`](burn::backend::Autodiff) overrides this with a tracked
    /// loss (the predictions are never differentiated).
    fn linear_relu_cross_entropy_and_predictions(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        let (loss, _, predictions) = Self::head_loss_gradients_and_predictions(
            x,
            weight,
            bias,
            labels,
            HeadWanted::NONE,
            options,
        );
        (loss, predictions)
    }

    /// The per-row losses `[B]`, unweighted (f32, or f64 for f64 inputs), and for the row
    /// weights `rho` `[B]` (in that dtype too: f32 for f32 and bf16 inputs; checked) the wanted
    /// gradients of `sum_r rho[r] loss[r]`: the
    /// streamed path's step under [`HeadLoss`](crate::HeadLoss) options without smoothing
    /// (`rho` is `w[y] / sum w` for the mean, `w[y]` for the sum, `w[y] g[r]` in the backward
    /// step of the per-row reduction). A label outside `[0, C)` gets a NaN loss and a NaN
    /// gradient row.
    ///
    /// The default computes Z with [`head_logits`](Self::head_logits), the row algebra with
    /// stock ops on `[B, C]`, and the gradients with [`head_backward`](Self::head_backward);
    /// the CubeCL backends at C > 32 run the streamed path with `rho` in its row kernel.
    fn head_rows_loss_and_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        rho: FloatTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>) {
        crate::loss::rows_loss_and_gradients::<Self>(
            [x, weight, bias],
            labels,
            rho,
            wanted,
            options,
        )
    }

    /// The row algebra of [`HeadLoss`](crate::HeadLoss) options on `H = act(Z)`, Z `[B, C]`:
    /// the per-row losses `L` `[B]` (f32, or f64 for f64 inputs) and their gradients
    /// `G = dL[r]/dH[r]` `[B, C]` (Z's dtype), for the materialized path. `labels` `[B]` have
    /// the ignored rows' mapped to 0; `row_weight` is `w[y]` per row (0 ignored, NaN for a
    /// label outside `[0, C)`), `keep` 0 for an ignored row and 1 elsewhere; `class_weights`
    /// `[C]` and `smoothing` as in `HeadLoss`. The default is stock ops; `Fusion` runs its
    /// inner backend's as one operation.
    fn head_row_losses(
        z: FloatTensor<Self>,
        labels: IntTensor<Self>,
        row_weight_and_keep: [FloatTensor<Self>; 2],
        class_weights: Option<FloatTensor<Self>>,
        smoothing: f32,
        activation: HeadActivation,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        crate::loss::row_losses::<Self>(
            z,
            labels,
            row_weight_and_keep,
            class_weights,
            smoothing,
            activation,
        )
    }

    /// The op under [`HeadLoss`](crate::HeadLoss) options, `[1]` (`[B]` for
    /// [`HeadReduction::None`](crate::HeadReduction)): what
    /// [`crate::linear_relu_cross_entropy_loss`] runs for options that are not plain, B > 0.
    /// The default computes the result alone; [`Autodiff`](burn::backend::Autodiff) overrides
    /// it with a tracked op.
    fn linear_relu_cross_entropy_loss(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        loss: &crate::HeadLoss,
        options: HeadOptions,
    ) -> FloatTensor<Self> {
        crate::loss::forward_only::<Self>([x, weight, bias], labels, loss, options)
    }

    /// The loss alone, `[1]`: [`head_loss_and_gradients`](Self::head_loss_and_gradients) with
    /// no gradient wanted. [`Autodiff`](burn::backend::Autodiff) overrides this with a tracked
    /// op whose backward step produces the gradients.
    fn linear_relu_cross_entropy(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        options: HeadOptions,
    ) -> FloatTensor<Self> {
        Self::head_loss_and_gradients(x, weight, bias, labels, HeadWanted::NONE, options).0
    }
}

/// The default of [`FusedHeadBackend::head_loss_and_gradients`] (without `predict`) and of
/// [`FusedHeadBackend::head_loss_gradients_and_predictions`] (with it): B's forward, with
/// `predict` the argmax of its Z's activation (stock ops), then, if any gradient is wanted,
/// B's backward with an upstream gradient of 1.
pub(crate) fn forward_then_backward<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    labels: IntTensor<B>,
    wanted: HeadWanted,
    options: HeadOptions,
    predict: bool,
) -> (FloatTensor<B>, HeadGradients<B>, Option<IntTensor<B>>) {
    let dtype = labels.dtype();
    let fwd = B::head_forward(x.clone(), weight.clone(), bias, labels, options);
    let predictions =
        predict.then(|| predictions_of::<B>(fwd.z.clone(), options.activation, dtype));
    if !wanted.any() {
        return (fwd.loss, HeadGradients::none(), predictions);
    }
    let loss = float::<B, 1>(fwd.loss); // [1]
    let one = Tensor::<B, 1>::ones([1], (&loss.device(), loss.dtype())); // [1]
    let grads = B::head_backward(x, weight, fwd.z, fwd.dh, prim(one), wanted, options);
    (prim(loss), grads, predictions)
}

impl<B: Backend> HeadGradients<B> {
    /// No gradient.
    pub fn none() -> Self {
        Self {
            x: None,
            weight: None,
            bias: None,
        }
    }
}

/// Zeros of `shape` on `like`'s device and dtype, or, for a shape with no element, an empty
/// tensor made without a kernel: Burn 0.21's fill of an empty tensor launches zero cubes, which
/// CUDA refuses (`CUDA_ERROR_INVALID_VALUE`), leaving the device unusable.
fn zeros_or_empty<B: Backend, const D: usize>(
    shape: [usize; D],
    like: &Tensor<B, 2>,
) -> Tensor<B, D> {
    let (device, dtype) = (like.device(), like.dtype());
    if shape.iter().product::<usize>() == 0 {
        Tensor::empty(shape, (&device, dtype))
    } else {
        Tensor::zeros(shape, (&device, dtype))
    }
}

/// The predicted class of each row of `act(Z)`, `[B]` of int dtype `dtype`, from stock ops: the
/// first class of the row's largest value (the rule of the CubeCL row kernel, written out
/// rather than left to a backend's `argmax`).
pub(crate) fn predictions_of<B: Backend>(
    z: FloatTensor<B>,
    activation: HeadActivation,
    dtype: DType,
) -> IntTensor<B> {
    let z = float::<B, 2>(z); // [B, C]
    let [batch, classes] = z.dims();
    let device = z.device();
    if batch == 0 {
        return Tensor::<B, 1, Int>::empty([0], (&device, dtype)).into_primitive();
    }
    let h = match activation {
        HeadActivation::Relu => z.clone().mask_fill(z.lower_equal_elem(0), 0),
        HeadActivation::Identity => z,
    }; // [B, C]
    let top = h.clone().max_dim(1).expand([batch, classes]); // [B, C]
    let class = Tensor::<B, 1, Int>::arange(0..classes as i64, &device)
        .unsqueeze_dim::<2>(0)
        .expand([batch, classes]); // [B, C]
    let first = class
        .mask_fill(h.equal(top).bool_not(), classes as i64)
        .min_dim(1)
        .squeeze_dim::<1>(1); // [B]; C where no value equals the maximum (a NaN)
    let first = first
        .clone()
        .mask_fill(first.greater_equal_elem(classes as i64), 0);
    first.cast(dtype).into_primitive()
}

/// `dH g` `[B, C]` (the identity's stage 3), g `[1]` the upstream gradient.
pub(crate) fn scaled<B: Backend>(dh: FloatTensor<B>, grad_loss: FloatTensor<B>) -> FloatTensor<B> {
    let dh = float::<B, 2>(dh); // [B, C]
    if dh.shape().num_elements() == 0 {
        return prim(dh); // [0, C]: broadcasting against g [1, 1] would make it [1, C]
    }
    let g = float::<B, 1>(grad_loss).unsqueeze_dim::<2>(0); // [1, 1]
    prim(dh * g)
}

/// A float primitive as a tensor of rank `D`.
fn float<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// A float tensor as its primitive.
fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// NdArray runs the stock-op bodies; in f64 it is the independent reference.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> FusedHeadBackend
    for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>>,
    NdArrayTensor: From<SharedArray<I>>,
{
}

/// Flex (Burn's pure-Rust CPU backend, feature `flex`) runs the stock-op bodies.
#[cfg(feature = "flex")]
impl FusedHeadBackend for burn::backend::Flex {}

/// Candle (feature `candle`) runs the stock-op bodies. Burn 0.21 deprecates its Candle
/// backend; the impl stays while Burn ships it.
#[cfg(feature = "candle")]
#[allow(deprecated)]
impl<F, I> FusedHeadBackend for burn::backend::Candle<F, I>
where
    F: burn::backend::candle::FloatCandleElement,
    I: burn::backend::candle::IntCandleElement,
{
}
