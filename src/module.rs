//! The op as a Burn `Module`, shaped as `nn::Linear`: `weight` `[C, I]` and an optional
//! `bias` `[C]`, `forward` for the logits, `forward_loss` for the loss.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::backend::FusedHeadBackend;
use crate::ops::{
    TokenStats, fused_linear_cross_entropy, fused_linear_cross_entropy_and_predictions,
    fused_linear_cross_entropy_with_token_stats, logits,
};
use crate::options::{
    HeadAccumulation, HeadActivation, HeadLogits, HeadOptions, HeadPrecision, HeadReduction,
};

/// Configuration of a [`FusedLinearCrossEntropy`]: `LinearConfig`'s fields and the op's
/// [`HeadOptions`].
///
/// ```
/// use burn::backend::NdArray;
/// use burn_fused_head::{FusedLinearCrossEntropyConfig, HeadPrecision};
///
/// let head = FusedLinearCrossEntropyConfig::new(64, 1000)
///     .with_ignore_index(Some(-100))
///     .with_precision(HeadPrecision::Tf32)
///     .init::<NdArray>(&Default::default());
/// assert_eq!(head.weight.dims(), [1000, 64]);
/// ```
#[derive(Config, Debug)]
pub struct FusedLinearCrossEntropyConfig {
    /// I, the size of each input row.
    pub d_input: usize,
    /// C, the number of classes.
    pub n_classes: usize,
    /// Whether the head has a bias b `[C]`. Default: true.
    #[config(default = true)]
    pub bias: bool,
    /// Initializer of W (and of b, unless `bias_initializer` is set). The default is
    /// `LinearConfig`'s: Kaiming uniform with gain `1/sqrt(3)`, that is U(-k, k) with
    /// `k = 1/sqrt(I)`.
    #[config(
        default = "Initializer::KaimingUniform{gain: 0.5773502691896258, fan_out_only: false}"
    )]
    pub initializer: Initializer,
    /// Initializer of b; `None` (the default) uses `initializer`, as `Linear` does. With
    /// [`HeadActivation::Relu`], `Some(Initializer::Constant { value: 1.0 })` keeps rows whose
    /// logits all start `<= 0` (which get no gradient) from appearing.
    pub bias_initializer: Option<Initializer>,
    /// The op's options. Default: `HeadOptions::new()`, `Linear` + `CrossEntropyLoss`.
    #[config(default = "HeadOptions::new()")]
    pub options: HeadOptions,
}

/// Setters of the config's [`HeadOptions`], one per option.
macro_rules! option_setters {
    ($($setter:ident: $ty:ty),* $(,)?) => {$(
        #[doc = concat!("Sets `options.", stringify!($setter), "`: see [`HeadOptions::",
            stringify!($setter), "`].")]
        pub fn $setter(mut self, value: $ty) -> Self {
            self.options = self.options.$setter(value);
            self
        }
    )*};
}

impl FusedLinearCrossEntropyConfig {
    option_setters!(
        with_activation: HeadActivation,
        with_precision: HeadPrecision,
        with_ignore_index: Option<i64>,
        with_pad_tokens: Option<Vec<usize>>,
        with_class_weights: Option<Vec<f32>>,
        with_smoothing: Option<f32>,
        with_reduction: HeadReduction,
        with_logit_scale: Option<f32>,
        with_softcap: Option<f32>,
        with_z_loss: Option<f32>,
        with_chunk_elements: Option<usize>,
        with_accumulation: HeadAccumulation,
        with_logits: HeadLogits,
    );

    /// A head with W `[C, I]` and b `[C]` on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> FusedLinearCrossEntropy<B> {
        let fans = (Some(self.d_input), Some(self.n_classes));
        let bias_initializer = self.bias_initializer.as_ref().unwrap_or(&self.initializer);
        FusedLinearCrossEntropy {
            weight: self.initializer.init_with(
                [self.n_classes, self.d_input],
                fans.0,
                fans.1,
                device,
            ),
            bias: self
                .bias
                .then(|| bias_initializer.init_with([self.n_classes], fans.0, fans.1, device)),
            options: self.options.clone(),
        }
    }
}

/// `nn::Linear` and a softmax cross-entropy in one fused op: `forward` gives the logits
/// `act(X W^T + b)` as `Linear` does (scaled and softcapped where the options say so),
/// `forward_loss` the loss without materializing them
/// where the backend can avoid it. Drop it in as the last layer of a model; it works with
/// Burn's optimizers and recorders like any module.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::tensor::{Distribution, Int, Tensor};
/// use burn_fused_head::FusedLinearCrossEntropyConfig;
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let head = FusedLinearCrossEntropyConfig::new(16, 10).init::<B>(&device);
/// let x = Tensor::<B, 3>::random([2, 4, 16], Distribution::Normal(0.0, 1.0), &device); // [batch, seq, I]
/// let targets = Tensor::<B, 2, Int>::from_ints([[1, 2, 3, 4], [5, 6, 7, 8]], &device); // [batch, seq]
///
/// let loss = head.forward_loss(x.clone(), targets); // [1]
/// let grads = loss.backward();
/// assert!(head.weight.grad(&grads).is_some());
/// assert_eq!(head.forward(x).dims(), [2, 4, 10]); // the logits, as `Linear::forward`
/// ```
#[derive(Module, Debug)]
pub struct FusedLinearCrossEntropy<B: Backend> {
    /// W, stored `[C, I]`: one class's coefficients are contiguous (`nn::Linear` stores
    /// `[I, C]`).
    pub weight: Param<Tensor<B, 2>>,
    /// b, `[C]`.
    pub bias: Option<Param<Tensor<B, 1>>>,
    /// The op's options (from the config; not part of the record).
    #[module(skip)]
    pub options: HeadOptions,
}

impl<B: FusedHeadBackend> FusedLinearCrossEntropy<B> {
    /// The head's output `H = act(X W^T + b)`, `[.., C]` for X `[.., I]`, as
    /// `Linear::forward` (the logits themselves with the identity), times the logit scale and
    /// softcapped where the options say so: the logits the loss's softmax sees. Its argmax
    /// over the last dim is the prediction. Runs the op's forward kernels in the head's
    /// precision, tracked under autodiff (the backward step is the op's backward kernels; the
    /// scale and the softcap are stock ops, the softcap's gradient exact where f32's tanh is
    /// saturated, as the loss's).
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let classes = self.weight.dims()[0];
        self.options
            .check("FusedLinearCrossEntropy::forward", classes);
        let h = logits(x, self.weight.val(), self.bias(), self.options.kernels());
        let h = match self.options.logit_scale {
            Some(s) if s != 1.0 => h * s as f64,
            _ => h,
        };
        match self.options.softcap {
            Some(cap) => softcapped(h, cap as f64),
            None => h,
        }
    }

    /// The loss of `x` `[.., I]` against `targets` `[..]` (X's leading dims) under the head's
    /// options: `[1]`, or the per-row losses `[N]` for [`HeadReduction::None`]. See
    /// [`fused_linear_cross_entropy`] for the formula, edge cases and panics.
    pub fn forward_loss<const D: usize, const DL: usize>(
        &self,
        x: Tensor<B, D>,
        targets: Tensor<B, DL, Int>,
    ) -> Tensor<B, 1> {
        let weight = self.weight.val();
        fused_linear_cross_entropy(x, weight, self.bias(), targets, &self.options)
    }

    /// The loss, as [`forward_loss`](Self::forward_loss), and the predicted class of each row
    /// (the argmax over C of H, in the targets' shape), in one call: what a metric needs,
    /// without a second pass. See [`fused_linear_cross_entropy_and_predictions`].
    pub fn forward_loss_and_predictions<const D: usize, const DL: usize>(
        &self,
        x: Tensor<B, D>,
        targets: Tensor<B, DL, Int>,
    ) -> (Tensor<B, 1>, Tensor<B, DL, Int>) {
        let weight = self.weight.val();
        fused_linear_cross_entropy_and_predictions(x, weight, self.bias(), targets, &self.options)
    }

    /// The loss, as [`forward_loss`](Self::forward_loss), and each row's statistics
    /// (log-sum-exp, log-probability of the target, entropy) in the targets' shape, in one
    /// call. See [`fused_linear_cross_entropy_with_token_stats`].
    pub fn forward_loss_and_token_stats<const D: usize, const DL: usize>(
        &self,
        x: Tensor<B, D>,
        targets: Tensor<B, DL, Int>,
    ) -> (Tensor<B, 1>, TokenStats<B, DL>) {
        let weight = self.weight.val();
        fused_linear_cross_entropy_with_token_stats(x, weight, self.bias(), targets, &self.options)
    }
}

impl<B: Backend> FusedLinearCrossEntropy<B> {
    /// This head with `options` in place of its own (the parameters as they are).
    pub fn with_options(self, options: HeadOptions) -> Self {
        Self { options, ..self }
    }

    /// b's value, where the head has one.
    fn bias(&self) -> Option<Tensor<B, 1>> {
        self.bias.as_ref().map(|b| b.val())
    }
}

/// A trained `nn::Linear` as the head, the op's default options (`with_options` sets others):
/// W is the layer's weight transposed to `[C, I]` (one copy through the host, whatever the
/// layer's `LinearLayout`), b its bias. The parameters keep their ids; W requires its gradient.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::nn::LinearConfig;
/// use burn_fused_head::FusedLinearCrossEntropy;
///
/// let linear = LinearConfig::new(16, 10).init::<NdArray>(&Default::default()); // weight [I, C]
/// let head = FusedLinearCrossEntropy::from(linear);
/// assert_eq!(head.weight.dims(), [10, 16]);
/// ```
impl<B: Backend> From<Linear<B>> for FusedLinearCrossEntropy<B> {
    fn from(linear: Linear<B>) -> Self {
        let (id, weight, _) = linear.weight.consume(); // [I, C]
        let (device, dtype) = (weight.device(), weight.dtype());
        // A contiguous [C, I] leaf that requires its gradient, as `Param::from_tensor` makes
        // one: the kernels read W row by row, and an optimizer updates it.
        let weight = Tensor::<B, 2>::from_data(weight.transpose().into_data(), (&device, dtype));
        Self {
            weight: Param::initialized(id, weight.require_grad()), // [C, I]
            bias: linear.bias,
            options: HeadOptions::new(),
        }
    }
}

#[cfg(feature = "train")]
impl<B: FusedHeadBackend> FusedLinearCrossEntropy<B> {
    /// burn-train's [`ClassificationOutput`](burn_train::ClassificationOutput) of `x` `[B, I]`
    /// against `targets` `[B]`, from one call of the op
    /// ([`forward_loss_and_predictions`](Self::forward_loss_and_predictions)): the loss, and
    /// as `output` the one-hot `[B, C]` (0 and 1, in the loss's dtype) of each row's
    /// predicted class. burn-train's `AccuracyMetric` takes the argmax of `output`, which is
    /// that class; metrics that read the scores themselves (top-k accuracy, calibration) need
    /// the head's [`forward`](Self::forward) instead, a second product. The one-hot is a
    /// `[B, C]` tensor: at a large C, prefer the predictions with a metric of your own.
    pub fn forward_classification(
        &self,
        x: Tensor<B, 2>,
        targets: Tensor<B, 1, Int>,
    ) -> burn_train::ClassificationOutput<B> {
        let classes = self.weight.dims()[0];
        let (loss, predictions) = self.forward_loss_and_predictions(x, targets.clone());
        let output = if predictions.dims()[0] == 0 {
            // No fill kernel of zero cubes (CUDA refuses those launches; DESIGN.md).
            Tensor::empty([0, classes], (&loss.device(), loss.dtype()))
        } else {
            // [B, C] in the loss's float dtype (`float()` alone gives the device's default).
            predictions.one_hot::<2>(classes).float().cast(loss.dtype())
        };
        burn_train::ClassificationOutput::new(loss, output, targets)
    }
}

/// `cap tanh(h / cap)` in stock ops whose gradient is exact where the tanh saturates: with
/// `u = h / cap`, `s = sign(u)` (1 at 0) taken as a constant and `e = exp(-2 s u)`,
/// `tanh(u) = s (1 - e) / (1 + e)`, whose autodiff derivative is `4 e / (1 + e)^2` (Burn's
/// `tanh` differentiates as `1 - tanh^2`, 0 once a rounded tanh is 1).
fn softcapped<B: Backend, const D: usize>(h: Tensor<B, D>, cap: f64) -> Tensor<B, D> {
    let u = h / cap;
    // Built from a comparison: never tracked.
    let sign = u.ones_like().mask_fill(u.clone().lower_elem(0), -1.0);
    let e = (u * sign.clone() * -2.0).exp();
    let t = (e.clone().neg() + 1.0) / (e + 1.0);
    t * sign * cap
}
