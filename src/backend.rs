//! The backend extension trait, [`FusedHeadBackend`], and the types of its methods. Default
//! bodies are stock Burn tensor ops, so every Burn backend runs the op; `NdArray<f64>` running
//! these bodies is the independent reference the kernels are gated against.
//!
//! The trait has three layers:
//! - the six stages and the mean (`head_linear_relu_forward` .. `head_mean_loss`): the
//!   readable model, one step of the derivation each, which the gates compare stage by stage;
//! - the fused methods the op runs (`head_logits`, `head_forward`, `head_backward`,
//!   `head_step`, `head_row_losses`), which the CubeCL backends replace with kernels;
//! - the op itself, [`FusedHeadBackend::head_cross_entropy`], which `Autodiff` overrides to
//!   track it.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::options::{HeadActivation, HeadOptions, HeadPrecision};
pub use crate::options::{KernelOptions, RowTerms};
use crate::pairwise;
pub use crate::rows::{HeadRowLosses, HeadTokenStats};
use crate::rows::{Rows, denominator, reduce, rows, sums_dtype, weighted_rows};

/// What the forward pass keeps for the backward pass.
#[derive(Debug, Clone)]
pub struct HeadForward<B: Backend> {
    /// Mean cross-entropy over the batch, `[1]`.
    pub loss: FloatTensor<B>,
    /// Pre-activation `Z = X W^T + b`, `[B, C]`: the ReLU mask of the backward pass (unused by
    /// the identity's).
    pub z: FloatTensor<B>,
    /// `dH = (softmax(H) - onehot(targets)) / B`, `[B, C]`, for a unit upstream gradient.
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

/// What one training step ([`FusedHeadBackend::head_step`]) computes besides the loss.
#[derive(Debug, Clone)]
pub struct HeadStep<B: Backend> {
    /// The gradients to produce, for a unit upstream gradient.
    pub wanted: HeadWanted,
    /// Whether to find each row's predicted class too.
    pub predictions: bool,
    /// Each row's weight `rho` `[B]` (f32, or f64 for f64 inputs): with it, the loss is the
    /// per-row losses `[B]`, unweighted, and the gradients are those of
    /// `sum_r rho[r] loss[r]`; without, the loss is the mean `[1]` and the gradients its own.
    pub row_weights: Option<FloatTensor<B>>,
    /// The logit scale, softcap and z-loss, and whether to give each row's statistics
    /// ([`RowTerms`]; its activation is not read, `kernels`' is; its smoothing must be 0).
    /// None of them needs `row_weights`: without, the loss is the mean over the rows of the
    /// cross-entropy of the logits `H` the softmax sees plus `zeta lse[r]^2`, and the
    /// statistics come back where asked for. With `row_weights`, the loss rows stay the
    /// cross-entropy's of the logits `H` the softmax sees; the caller adds the z-term
    /// `zeta lse[r]^2` from [`HeadStepOutput::token_stats`].
    pub terms: RowTerms,
    /// With row weights and a z-loss, each row's weight of its z-term `[B]` (the row
    /// weights' dtype; not read without row weights): the
    /// gradients are those of `sum_r rho[r] loss[r] + z_weights[r] zeta lse[r]^2` (`keep[r]`
    /// times the row's upstream gradient: the z-term is not class-weighted).
    pub z_weights: Option<FloatTensor<B>>,
}

impl<B: Backend> HeadStep<B> {
    /// The mean loss alone: no gradient, no prediction, no row weight.
    pub fn loss() -> Self {
        Self {
            wanted: HeadWanted::NONE,
            predictions: false,
            row_weights: None,
            terms: RowTerms::new(HeadActivation::Identity),
            z_weights: None,
        }
    }

    /// This step with the gradients `wanted`.
    pub fn with_wanted(self, wanted: HeadWanted) -> Self {
        Self { wanted, ..self }
    }

    /// This step with (or without) the predictions.
    pub fn with_predictions(self, predictions: bool) -> Self {
        Self {
            predictions,
            ..self
        }
    }

    /// This step with each row's weight `rho` `[B]`.
    pub fn with_row_weights(self, rho: FloatTensor<B>) -> Self {
        Self {
            row_weights: Some(rho),
            ..self
        }
    }

    /// This step with the LM terms and statistics of `terms`.
    pub fn with_terms(self, terms: RowTerms) -> Self {
        Self { terms, ..self }
    }

    /// This step with each row's z-term weight `[B]`.
    pub fn with_z_weights(self, z_weights: FloatTensor<B>) -> Self {
        Self {
            z_weights: Some(z_weights),
            ..self
        }
    }
}

/// What [`FusedHeadBackend::head_step`] gives back.
#[derive(Debug, Clone)]
pub struct HeadStepOutput<B: Backend> {
    /// The mean loss `[1]`, or with row weights the per-row losses `[B]` (f32, or f64 for f64
    /// inputs).
    pub loss: FloatTensor<B>,
    /// The wanted gradients, for a unit upstream gradient.
    pub gradients: HeadGradients<B>,
    /// Where asked for, each row's predicted class `[B]` in the targets' int dtype: the
    /// argmax of `s act(X W^T + b)` (s the terms' logit scale, 1 without), the first class of
    /// the row's largest value (a row with a NaN gets an unspecified class; its loss is NaN).
    pub predictions: Option<IntTensor<B>>,
    /// With [`RowTerms::token_stats`] in the step's terms, or row weights and a z-loss (an
    /// unweighted z-loss alone gives none), each row's statistics
    /// in the loss rows' dtype: its log-sum-exp, entropy, and the log-probability of its
    /// target, `-loss[r]` with row weights (on every row: the caller masks the ignored ones);
    /// without row weights, where `loss` is the mean, each row's own `-ce` (with a z-loss,
    /// `zeta lse^2 - l` from the row's `l = ce + zeta lse^2`).
    pub token_stats: Option<HeadTokenStats<B>>,
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

/// What the op ([`FusedHeadBackend::head_cross_entropy`]) returns besides the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadExtras {
    /// Each row's predicted class.
    pub predictions: bool,
    /// Each row's statistics ([`HeadTokenStats`]).
    pub token_stats: bool,
}

impl HeadExtras {
    /// The predictions alone.
    pub const PREDICTIONS: Self = Self {
        predictions: true,
        token_stats: false,
    };

    /// The statistics alone.
    pub const TOKEN_STATS: Self = Self {
        predictions: false,
        token_stats: true,
    };
}

/// What [`FusedHeadBackend::head_cross_entropy`] gives besides the loss: what
/// [`HeadExtras`] asked for, never tracked.
#[derive(Debug, Clone)]
pub struct HeadExtraOutputs<B: Backend> {
    /// Each row's predicted class `[B]`, in the targets' int dtype.
    pub predictions: Option<IntTensor<B>>,
    /// Each row's statistics, `[B]` each (f32, or f64 for f64 inputs).
    pub token_stats: Option<HeadTokenStats<B>>,
}

impl<B: Backend> HeadExtraOutputs<B> {
    /// The predictions alone (or nothing).
    pub fn predictions(predictions: Option<IntTensor<B>>) -> Self {
        Self {
            predictions,
            token_stats: None,
        }
    }
}

/// A Burn backend that runs the fused linear cross-entropy.
///
/// Shapes: X `[B, I]`, W `[C, I]`, b `[C]`, targets `[B]` (integers in `[0, C)`), H, Z, dH,
/// dZ `[B, C]`. Each method has a default body built from stock Burn ops; a backend with
/// kernels overrides the stages and the fused methods. Shapes are validated by the public
/// functions ([`crate::fused_linear_cross_entropy`]); calling these methods directly skips
/// that step.
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

    /// Whether, for X `[batch, inputs]` and C = `classes`, the op computes the gradients in the
    /// forward pass ([`head_step`](Self::head_step) with the tracked inputs' gradients) rather
    /// than keep Z and dH for a backward pass. [`Autodiff`](burn::backend::Autodiff) asks this
    /// to choose. The default (stock ops) is false; the CubeCL backends say true for C > 32,
    /// where they stream the batch in chunks of rows and never hold an f32 `[B, C]` tensor.
    fn head_gradients_in_forward(batch: usize, inputs: usize, classes: usize) -> bool {
        let _ = (batch, inputs, classes);
        false
    }

    /// The float dtype of the Z and dH that [`head_forward`](Self::head_forward) returns (and
    /// [`head_backward`](Self::head_backward) takes) for inputs of `dtype` at C = `classes`.
    /// The default (stock ops) is `dtype`: they are rounded to the inputs' type. The CubeCL
    /// backends on CUDA say f32 for bf16 and f16 inputs at C <= 32, where their kernels read X
    /// in its own type and keep Z and dH unrounded; [`Autodiff`](burn::backend::Autodiff) then
    /// keeps them for its backward step, as it does for f32 inputs. Elsewhere half-precision
    /// inputs keep no dH (f16's `(p - onehot) / B` falls below its range at large B): their
    /// gradients are computed in the forward pass.
    fn head_forward_state_dtype(dtype: DType, classes: usize) -> DType {
        let _ = classes;
        dtype
    }

    /// Whether the stock-op bodies compute their products (Z, dW and dX) in f64 and round them
    /// once to the inputs' float type. An f32 dot product of n terms is off by up to about
    /// `n u` of the terms' magnitudes; where the logits are large (about 1e4) that error moves
    /// near-tied probabilities enough to take dW outside the gate, whatever the order of the
    /// f32 sum (DESIGN.md, "Accuracy at the edge of f32"). True on the CPU backends (NdArray,
    /// Flex, Candle), where f64 products cost about twice the f32 ones; false by default and on
    /// the CubeCL backends, which run their own kernels.
    fn head_products_in_f64() -> bool {
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
        let z = if inputs == 0 {
            zeros_or_empty::<Self, 2>([batch, classes], &x) + bias.unsqueeze_dim(0)
        } else {
            // In f64 where the backend has it, rounded once (see `accurate`).
            let dtype = x.dtype();
            let wide = Self::head_products_in_f64();
            let (x, weight, bias) = (widened(x, wide), widened(weight, wide), widened(bias, wide));
            (x.matmul(weight.transpose()) + bias.unsqueeze_dim(0)).cast(dtype)
        }; // [B, C]
        // ReLU as `Z <= 0 -> 0`, which keeps a NaN: NdArray's own `relu` maps NaN to 0.
        let h = z.clone().mask_fill(z.clone().lower_equal_elem(0), 0); // [B, C]
        (prim(z), prim(h))
    }

    /// The head's output `H = act(X W^T + b)` `[B, C]` alone, without the loss. The default is
    /// stage 1 ([`head_linear_relu_forward`](Self::head_linear_relu_forward)), its H for ReLU
    /// and its Z for the identity, exact whatever the precision; the CubeCL backends run the
    /// fused forward kernels without the loss (C <= 32: one pass over X; C > 32: the tiled
    /// product, on TF32 tensor cores with [`HeadPrecision::Tf32`] where the device has them);
    /// [`Autodiff`](burn::backend::Autodiff) tracks its inner backend's, with
    /// [`head_backward`](Self::head_backward) as the backward step.
    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        kernels: KernelOptions,
    ) -> FloatTensor<Self> {
        let (z, h) = Self::head_linear_relu_forward(x, weight, bias);
        match kernels.activation {
            HeadActivation::Relu => h,
            HeadActivation::Identity => z,
        }
    }

    /// Stage 2: stable softmax cross-entropy; returns `(loss_rows [B], dH [B, C])` with
    /// `loss_rows[r] = ln(sum_j exp(H[r,j] - m)) - (H[r,label] - m)`, `m = max_j H[r,j]`, and
    /// `dH = (p - onehot) / B` from the same probabilities (the target's column as `-(sum of
    /// the other exponentials) / d`, which keeps the digits `p_y - 1` loses in a confident
    /// row; sums in a fixed pairwise order). A row whose label is outside `[0, C)` gets a NaN
    /// loss and a NaN dH row.
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

        let softmax = crate::rows::row_softmax(h, target.clone());
        let picked = softmax.shifted.gather(1, target); // [B, 1]
        let loss = (softmax.d.log() - picked).squeeze_dim::<1>(1); // [B]
        let loss = loss.mask_fill(invalid.clone(), f64::NAN);

        // p - onehot, its target column from the other columns (`rows::row_softmax`).
        let dh = softmax.grad / batch as f64; // [B, C]
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
        let dtype = dz.dtype();
        let wide = Self::head_products_in_f64();
        prim(
            widened(dz, wide)
                .transpose()
                .matmul(widened(x, wide))
                .cast(dtype),
        ) // [C, I]
    }

    /// Stage 5: `db = column_sum(dZ)`, `[C]`.
    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        let dz = float::<Self, 2>(dz); // [B, C]
        let [batch, classes] = dz.dims();
        if batch == 0 {
            return prim(zeros_or_empty::<Self, 1>([classes], &dz)); // the sum over no rows
        }
        prim(pairwise::sum_dim(dz, 0).squeeze_dim::<1>(0)) // [C]
    }

    /// Stage 6: `dX = dZ W`, `[B, I]`.
    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let dz = float::<Self, 2>(dz); // [B, C]
        let weight = float::<Self, 2>(weight); // [C, I]
        let ([batch, classes], inputs) = (dz.dims(), weight.dims()[1]);
        if batch * classes * inputs == 0 {
            return prim(zeros_or_empty::<Self, 2>([batch, inputs], &dz)); // the empty sum
        }
        let dtype = dz.dtype();
        let wide = Self::head_products_in_f64();
        prim(widened(dz, wide).matmul(widened(weight, wide)).cast(dtype)) // [B, I]
    }

    /// The sum of `values` `[n]`, `[1]`, in the fixed pairwise order of the cross-entropy
    /// options' reductions (the mean's denominator and the mean or sum of the rows): level
    /// after level, element k of the first half plus element k of the second half, an odd
    /// length carrying its last element to the next level, `ceil(log2 n)` levels; 0 for
    /// n = 0. The default is stock element-wise additions, a launch or more per level; the
    /// CubeCL backends run one kernel of the same order (f32), so the bits are the same on
    /// every backend.
    fn head_sum(values: FloatTensor<Self>) -> FloatTensor<Self> {
        stock_sum::<Self>(values)
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
        prim(pairwise::sum(loss_rows) / batch as f64) // [1]
    }

    /// The fused forward: stages 1 and 2 and the mean, keeping Z and dH for the backward pass
    /// (in [`head_forward_state_dtype`](Self::head_forward_state_dtype), the loss in the
    /// inputs' dtype). The default runs the stages one by one, exact whatever the precision;
    /// with [`HeadActivation::Identity`], stage 2 takes Z where it takes H.
    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        targets: IntTensor<Self>,
        kernels: KernelOptions,
    ) -> HeadForward<Self> {
        let (z, h) = Self::head_linear_relu_forward(x, weight, bias); // [B, C] each
        let h = match kernels.activation {
            HeadActivation::Relu => h,
            HeadActivation::Identity => z.clone(),
        };
        let (loss_rows, dh) = Self::head_softmax_cross_entropy(h, targets); // [B], [B, C]
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
        kernels: KernelOptions,
    ) -> HeadGradients<Self> {
        let dz = match kernels.activation {
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

    /// One training step: the loss and, for a unit upstream gradient, the gradients `step`
    /// wants, with the predictions where it asks for them, in one call.
    /// [`Autodiff`](burn::backend::Autodiff) runs this in the forward pass where
    /// [`head_gradients_in_forward`](Self::head_gradients_in_forward) says so, and scales the
    /// gradients by the upstream gradient in its backward step: the loss is a scalar (or, with
    /// row weights, the weights carry the upstream gradient), so that is the exact gradient. A
    /// tracked call whose backward never runs still pays for the gradients.
    ///
    /// Without row weights and with plain terms (or an empty batch), the default runs
    /// [`head_forward`](Self::head_forward), takes the predictions as the argmax of its Z's
    /// activation (stock ops), then, if any gradient is wanted,
    /// [`head_backward`](Self::head_backward) with an upstream gradient of 1; with a logit
    /// scale or a softcap, the step with each row's weight `1 / B` and the mean of its rows.
    /// With row weights it runs the materialized path: Z from [`head_logits`](Self::head_logits), the
    /// row algebra from [`head_row_losses`](Self::head_row_losses), the gradients from
    /// [`head_backward`](Self::head_backward). The CubeCL backends at C > 32 run the streamed
    /// path, the row weights and the predictions in its row kernel.
    fn head_step(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        targets: IntTensor<Self>,
        step: HeadStep<Self>,
        kernels: KernelOptions,
    ) -> HeadStepOutput<Self> {
        match step.row_weights {
            // The terms change nothing on an empty batch (NaN mean, zero gradients); the
            // statistics are still given (empty).
            None if step.terms.is_plain() || (x.shape()[0] == 0 && !step.terms.token_stats) => {
                unweighted_terms("head_step", &step.terms);
                forward_then_backward::<Self>(
                    [x, weight, bias],
                    targets,
                    step.wanted,
                    kernels,
                    step.predictions,
                )
            }
            None => {
                unweighted_terms("head_step", &step.terms);
                uniform_rows_step::<Self>([x, weight, bias], targets, step, kernels)
            }
            Some(rho) => {
                let z_weights = step.z_weights;
                let terms = step.terms;
                weighted_step::<Self>(
                    [x, weight, bias],
                    targets,
                    (rho, z_weights, terms),
                    step.wanted,
                    kernels,
                    step.predictions,
                )
            }
        }
    }

    /// The row algebra of the cross-entropy options on `A = act(Z)`, Z `[B, C]`: the per-row
    /// losses `L` `[B]` (f32, or f64 for f64 inputs), their gradients `G = dL[r]/dA[r]`
    /// `[B, C]` (Z's dtype) and, with `terms.token_stats`, each row's statistics, for the
    /// materialized path. `targets` `[B]` have the ignored rows' mapped to 0; `row_weight` is
    /// `w[y]` per row (0 ignored, NaN for a target outside `[0, C)`), `keep` 0 for an ignored
    /// row and 1 elsewhere; `class_weights` `[C]` as in [`HeadOptions`]; `terms` the smoothing
    /// and the logit terms ([`RowTerms`]). The default is stock ops; `Fusion` runs its inner
    /// backend's as one operation.
    fn head_row_losses(
        z: FloatTensor<Self>,
        targets: IntTensor<Self>,
        row_weight_and_keep: [FloatTensor<Self>; 2],
        class_weights: Option<FloatTensor<Self>>,
        terms: RowTerms,
    ) -> HeadRowLosses<Self> {
        crate::rows::row_losses::<Self>(z, targets, row_weight_and_keep, class_weights, terms)
    }

    /// The op: the cross-entropy of the logits against the targets under `options` (`[1]`, or
    /// `[B]` for [`HeadReduction::None`](crate::HeadReduction)) and what `extras` asks for
    /// besides; B > 0 where the options are not plain or the statistics are asked for. What
    /// [`crate::fused_linear_cross_entropy`] runs. The default computes the result alone:
    /// plain options through [`head_step`](Self::head_step), others through the streamed
    /// path's row weights (and LM terms) or the materialized path.
    /// [`Autodiff`](burn::backend::Autodiff) overrides it with a tracked op.
    fn head_cross_entropy(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        targets: IntTensor<Self>,
        options: &HeadOptions,
        extras: HeadExtras,
    ) -> (FloatTensor<Self>, HeadExtraOutputs<Self>) {
        if options.is_plain() && !extras.token_stats {
            let step = HeadStep::loss().with_predictions(extras.predictions);
            let out = Self::head_step(x, weight, bias, targets, step, options.kernels());
            return (out.loss, HeadExtraOutputs::predictions(out.predictions));
        }
        forward_only::<Self>([x, weight, bias], targets, options, extras)
    }
}

/// The default of [`FusedHeadBackend::head_step`] without row weights: B's forward, with
/// `predict` the argmax of its Z's activation (stock ops), then, if any gradient is wanted,
/// B's backward with an upstream gradient of 1.
pub(crate) fn forward_then_backward<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    targets: IntTensor<B>,
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> HeadStepOutput<B> {
    let dtype = targets.dtype();
    let fwd = B::head_forward(x.clone(), weight.clone(), bias, targets, kernels);
    let predictions = predict
        .then(|| predictions_of::<B>(fwd.z.clone(), RowTerms::new(kernels.activation), dtype));
    if !wanted.any() {
        return HeadStepOutput {
            loss: fwd.loss,
            gradients: HeadGradients::none(),
            predictions,
            token_stats: None,
        };
    }
    let loss = float::<B, 1>(fwd.loss); // [1]
    let one = Tensor::<B, 1>::ones([1], (&loss.device(), loss.dtype())); // [1]
    let gradients = B::head_backward(x, weight, fwd.z, fwd.dh, prim(one), wanted, kernels);
    HeadStepOutput {
        loss: prim(loss),
        gradients,
        predictions,
        token_stats: None,
    }
}

/// What the materialized path's forward ([`materialized`]) gives: Z `[B, C]`, the per-row
/// losses L `[B]`, their gradients G `[B, C]` and, where asked, each row's statistics.
pub(crate) struct Materialized<B: Backend> {
    pub z: FloatTensor<B>,
    pub losses: Tensor<B, 1>,
    pub gradients: FloatTensor<B>,
    pub token_stats: Option<HeadTokenStats<B>>,
}

/// The materialized path's forward on `B`: Z `[B, C]` from the fast path's logits (exact or
/// TF32 as `kernels` says), then B's [`FusedHeadBackend::head_row_losses`] with the options'
/// [`RowTerms`] (and the statistics with `token_stats`). Everything in [`sums_dtype`]:
/// half-precision inputs run in f32 (their products exact), and the backward casts the
/// gradients back to the inputs' dtype.
pub(crate) fn materialized<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    rows: &Rows<B>,
    loss: &HeadOptions,
    kernels: KernelOptions,
    token_stats: bool,
) -> Materialized<B> {
    let dtype = x.dtype();
    let (x, weight, bias) = (to_sums::<B>(x), to_sums::<B>(weight), to_sums::<B>(bias));
    let logits = for_sums(kernels, dtype).with_activation(HeadActivation::Identity);
    let z = B::head_logits(x, weight, bias, logits); // [B, C], in the sums' dtype
    let class_weights = loss.class_weights.as_ref().map(|w| {
        let (device, dtype) = (rows.weight.device(), rows.weight.dtype());
        let data = TensorData::new(w.clone(), [w.len()]).convert_dtype(dtype);
        Tensor::<B, 1>::from_data(data, (&device, dtype))
            .into_primitive()
            .tensor()
    });
    let terms = loss
        .row_terms(token_stats)
        .with_activation(kernels.activation);
    let out = B::head_row_losses(
        z.clone(),
        rows.labels.clone().into_primitive(),
        [rows.weight.clone(), rows.keep.clone()].map(|t| t.into_primitive().tensor()),
        class_weights,
        terms,
    );
    Materialized {
        z,
        losses: Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(out.losses)),
        gradients: out.gradients,
        token_stats: out.token_stats,
    }
}

/// The materialized path's backward: `dH = G u` with `u` `[B]` (each row's upstream
/// gradient), then B's fused backward with an upstream gradient of 1.
pub(crate) fn materialized_backward<B: FusedHeadBackend>(
    [x, weight, z]: [FloatTensor<B>; 3],
    g: FloatTensor<B>,
    u: Tensor<B, 1>,
    wanted: HeadWanted,
    kernels: KernelOptions,
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
        for_sums(kernels, input_dtype),
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

/// `kernels` for the materialized path on inputs of `dtype`: exact products for
/// half-precision inputs (as the op's own f32 fallback for them), as they are otherwise.
fn for_sums(kernels: KernelOptions, dtype: DType) -> KernelOptions {
    if sums_dtype(dtype) == dtype {
        kernels
    } else {
        kernels.with_precision(HeadPrecision::Exact)
    }
}

/// Whether `options` run on the streamed path of `B` for X `[batch, inputs]` and C classes:
/// where B computes the gradients in the forward pass, without smoothing (the logit terms
/// and the per-row statistics stream).
pub(crate) fn streams<B: FusedHeadBackend>(
    options: &HeadOptions,
    batch: usize,
    inputs: usize,
    classes: usize,
) -> bool {
    options.epsilon() == 0.0 && B::head_gradients_in_forward(batch, inputs, classes)
}

/// Panics unless `terms` may go without row weights (smoothing needs them).
pub(crate) fn unweighted_terms(op: &str, terms: &RowTerms) {
    assert!(terms.go_unweighted(), "{op}: smoothing does not stream");
}

/// [`FusedHeadBackend::head_step`] without row weights under a logit scale, a softcap, a
/// z-loss or the statistics, where no kernel takes them so: the step with each row's weight
/// `1/B` (the gradients of the mean; the z-term's weight too), its loss the mean of the rows
/// (`ce + zeta lse^2`) in [`reduce`]'s fixed order, in X's dtype, and the statistics where
/// asked for.
pub(crate) fn uniform_rows_step<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    targets: IntTensor<B>,
    step: HeadStep<B>,
    kernels: KernelOptions,
) -> HeadStepOutput<B> {
    let (batch, dtype) = (x.shape()[0], x.dtype());
    let options = (&B::float_device(&x), sums_dtype(dtype));
    let rho = Tensor::<B, 1>::full([batch], 1.0 / batch as f64, options);
    let (zeta, token_stats) = (step.terms.z_loss, step.terms.token_stats);
    let mut step = step.with_row_weights(rho.clone().into_primitive().tensor());
    if zeta != 0.0 {
        step = step.with_z_weights(rho.into_primitive().tensor());
    }
    let out = B::head_step(x, weight, bias, targets, step, kernels);
    let mut rows = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(out.loss));
    if zeta != 0.0 {
        let stats = out
            .token_stats
            .as_ref()
            .expect("head_step: a z-loss's statistics");
        let lse = stats.log_sum_exp.clone();
        let lse = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(lse));
        rows = rows + lse.cast(options.1).powi_scalar(2) * zeta as f64;
    }
    let count = Tensor::<B, 1>::full([1], batch as f64, options);
    let loss = reduce(rows, Some(count), crate::options::HeadReduction::Mean).cast(dtype);
    HeadStepOutput {
        loss: loss.into_primitive().tensor(),
        gradients: out.gradients,
        predictions: out.predictions,
        token_stats: out.token_stats.filter(|_| token_stats),
    }
}

/// The streamed step's (`head_step` with row weights and `terms`) result as the op's rows:
/// `L = w[y] l + zeta lse^2` per row, 0 where ignored (whatever the row's logits), and
/// with `terms.token_stats` the statistics, the log-probability 0 on the ignored rows.
pub(crate) fn streamed_rows<B: Backend>(
    out_loss: FloatTensor<B>,
    stats: Option<HeadTokenStats<B>>,
    rows: &Rows<B>,
    terms: RowTerms,
) -> (Tensor<B, 1>, Option<HeadTokenStats<B>>) {
    let l = weighted_rows(out_loss, rows); // [B]
    let dtype = l.dtype();
    let float1 = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t)).cast(dtype);
    let l = match &stats {
        Some(s) if terms.z_loss != 0.0 => {
            let lse = float1(s.log_sum_exp.clone());
            (l + lse.powi_scalar(2) * terms.z_loss as f64).mask_fill(rows.ignored.clone(), 0)
        }
        _ => l,
    };
    let stats = stats.filter(|_| terms.token_stats).map(|s| HeadTokenStats {
        log_sum_exp: prim(float1(s.log_sum_exp)),
        target_log_prob: prim(float1(s.target_log_prob).mask_fill(rows.ignored.clone(), 0)),
        entropy: prim(float1(s.entropy)),
    });
    (l, stats)
}

/// The result of `options` without gradients on `B` (an inner backend, or an untracked
/// call), and what `extras` asks for: the streamed path's per-row losses where it runs, else
/// the materialized forward.
pub(crate) fn forward_only<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    targets: IntTensor<B>,
    options: &HeadOptions,
    extras: HeadExtras,
) -> (FloatTensor<B>, HeadExtraOutputs<B>) {
    let classes = weight.shape()[0];
    let rows = rows::<B>(targets, options, classes, sums_dtype(x.dtype()));
    let denominator = denominator(&rows, options);
    forward_with_rows::<B>([x, weight, bias], &rows, denominator, options, extras)
}

/// [`forward_only`] from the targets' [`Rows`] and the mean's denominator, already made.
pub(crate) fn forward_with_rows<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    rows: &Rows<B>,
    denominator: Option<Tensor<B, 1>>,
    options: &HeadOptions,
    extras: HeadExtras,
) -> (FloatTensor<B>, HeadExtraOutputs<B>) {
    let (dtype, [batch, inputs]) = (x.dtype(), dims2(&x.shape()));
    let classes = weight.shape()[0];
    let kernels = options.kernels();
    let (l, outputs) = if streams::<B>(options, batch, inputs, classes) {
        let terms = options.row_terms(extras.token_stats);
        let step = HeadStep::loss()
            .with_predictions(extras.predictions)
            .with_row_weights(rows.weight.clone().into_primitive().tensor())
            .with_terms(terms)
            .with_z_weights(rows.keep.clone().into_primitive().tensor());
        let targets = rows.labels.clone().into_primitive();
        let out = B::head_step(x, weight, bias, targets, step, kernels);
        let (l, token_stats) = streamed_rows(out.loss, out.token_stats, rows, terms);
        let outputs = HeadExtraOutputs {
            predictions: out.predictions,
            token_stats,
        };
        (l, outputs)
    } else {
        let m = materialized::<B>(
            [x, weight, bias],
            rows,
            options,
            kernels,
            extras.token_stats,
        );
        let label_dtype = rows.labels.dtype();
        let predictions = extras
            .predictions
            .then(|| predictions_of::<B>(m.z, options.row_terms(false), label_dtype));
        let outputs = HeadExtraOutputs {
            predictions,
            token_stats: m.token_stats,
        };
        (m.losses, outputs)
    };
    let out = reduce(l, denominator, options.reduction);
    (out.cast(dtype).into_primitive().tensor(), outputs)
}

/// The default of [`FusedHeadBackend::head_step`] with row weights: the materialized path
/// with `rho` as each row's weight (no class weight, no smoothing, nothing ignored) and the
/// step's LM terms, the z-term weighted by `z_weights` (see [`HeadStep`]).
pub(crate) fn weighted_step<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    targets: IntTensor<B>,
    (rho, z_weights, terms): (FloatTensor<B>, Option<FloatTensor<B>>, RowTerms),
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> HeadStepOutput<B> {
    assert!(
        terms.smoothing == 0.0,
        "head_step: smoothing does not stream"
    );
    let dtype = x.dtype();
    let label_dtype = targets.dtype();
    let classes = weight.shape()[0];
    let stats = terms.wants_stats();
    // The cross-entropy rows (and the statistics) of the scaled, capped logits.
    let plain = HeadOptions::new()
        .with_activation(kernels.activation)
        .with_logit_scale((terms.logit_scale != 1.0).then_some(terms.logit_scale))
        .with_softcap(terms.softcap);
    let rows = rows::<B>(targets, &plain, classes, sums_dtype(dtype));
    let inputs = [x.clone(), weight.clone(), bias];
    let m = materialized::<B>(inputs, &rows, &plain, kernels, stats);
    let predictions = predict.then(|| {
        let terms = plain.row_terms(false);
        predictions_of::<B>(m.z.clone(), terms, label_dtype)
    });
    let rho = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(rho));
    let gradients = if !wanted.any() {
        HeadGradients::none()
    } else if terms.z_loss == 0.0 {
        materialized_backward::<B>([x, weight, m.z], m.gradients, rho, wanted, kernels)
    } else {
        // G = rho (the cross-entropy's row gradient) + z_weights (the z-term's): the row
        // algebra with rho as the rows' weight and the z-weights as `keep`.
        let z_weights = z_weights.expect("head_step: a z-loss needs z-weights");
        let sums = rows.weight.dtype();
        let rho_w = rows.weight.clone() * rho.cast(sums);
        let rows_terms = RowTerms {
            z_loss: terms.z_loss,
            ..plain.row_terms(false)
        };
        let out = B::head_row_losses(
            m.z.clone(),
            rows.labels.clone().into_primitive(),
            [prim(rho_w), z_weights],
            None,
            rows_terms,
        );
        let one = Tensor::<B, 1>::ones([rows.weight.dims()[0]], (&rows.weight.device(), sums));
        materialized_backward::<B>([x, weight, m.z], out.gradients, one, wanted, kernels)
    };
    HeadStepOutput {
        loss: m.losses.into_primitive().tensor(),
        gradients,
        predictions,
        token_stats: m.token_stats,
    }
}

/// `[rows, cols]` of a rank-2 shape.
fn dims2(shape: &burn::tensor::Shape) -> [usize; 2] {
    [shape[0], shape[1]]
}

/// `t` in f64 where `wide` ([`FusedHeadBackend::head_products_in_f64`]), else as it is.
fn widened<B: Backend, const D: usize>(t: Tensor<B, D>, wide: bool) -> Tensor<B, D> {
    if wide { t.cast(DType::F64) } else { t }
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

/// The predicted class of each row of `s act(Z)` (`terms`' activation and logit scale; its
/// softcap left out), `[B]` of int dtype `dtype`, from stock ops: the first class of the
/// row's largest value (the rule of the CubeCL row kernel, written out
/// rather than left to a backend's `argmax`).
pub(crate) fn predictions_of<B: Backend>(
    z: FloatTensor<B>,
    terms: RowTerms,
    dtype: DType,
) -> IntTensor<B> {
    let z = float::<B, 2>(z); // [B, C]
    let [batch, classes] = z.dims();
    let device = z.device();
    if batch == 0 {
        return Tensor::<B, 1, Int>::empty([0], (&device, dtype)).into_primitive();
    }
    // The softcap keeps the order, and in f32 it ties the logits it saturates: left out.
    let terms = RowTerms {
        softcap: None,
        ..terms
    };
    let (h, _) = crate::rows::logits_seen(z, terms); // [B, C]
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

/// [`FusedHeadBackend::head_sum`] in stock ops ([`pairwise::sum`]): its default, and the
/// CubeCL backends' where the values are not f32.
pub(crate) fn stock_sum<B: Backend>(values: FloatTensor<B>) -> FloatTensor<B> {
    prim(pairwise::sum(float::<B, 1>(values)))
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
    fn head_products_in_f64() -> bool {
        true
    }
}

/// Flex (Burn's pure-Rust CPU backend, feature `flex`) runs the stock-op bodies.
#[cfg(feature = "flex")]
impl FusedHeadBackend for burn::backend::Flex {
    fn head_products_in_f64() -> bool {
        true
    }
}

/// Candle (feature `candle`) runs the stock-op bodies. Burn 0.21 deprecates its Candle
/// backend; the impl stays while Burn ships it.
#[cfg(feature = "candle")]
#[allow(deprecated)]
impl<F, I> FusedHeadBackend for burn::backend::Candle<F, I>
where
    F: burn::backend::candle::FloatCandleElement,
    I: burn::backend::candle::IntCandleElement,
{
    fn head_products_in_f64() -> bool {
        true
    }
}
