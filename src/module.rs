//! The op as a Burn `Module`: `weight` `[C, I]` and `bias` `[C]` parameters.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::backend::{FusedHeadBackend, HeadActivation, HeadOptions, HeadPrecision};
use crate::ops::{
    linear_relu_cross_entropy_and_predictions_with, linear_relu_cross_entropy_with,
    linear_relu_logits_with,
};

/// Configuration of a [`FusedHead`].
#[derive(Config, Debug)]
pub struct FusedHeadConfig {
    /// I, the number of input features.
    pub inputs: usize,
    /// C, the number of classes.
    pub classes: usize,
    /// Initializer of W. The default is Burn's `Linear` default: Kaiming uniform with gain
    /// `1/sqrt(3)`, that is U(-k, k) with `k = 1/sqrt(I)`.
    #[config(
        default = "Initializer::KaimingUniform{gain: 0.5773502691896258, fan_out_only: false}"
    )]
    pub initializer: Initializer,
    /// Initializer of b. The default is the constant 1: with the ReLU on the logits, a row whose
    /// logits are all <= 0 gets no gradient, and with `Linear`'s init for b (U(-k, k)) such
    /// rows appear and stay (the README's model on random rows with Adam: 2 of 32 rows dead,
    /// loss 0.60 after 200 steps against stock's 0.10; with b = 1, none, and 0.107 against
    /// 0.104; `tests/module/cases.rs`).
    #[config(default = "Initializer::Constant{value: 1.0}")]
    pub bias_initializer: Initializer,
    /// How the large-C products are computed; see [`HeadPrecision`]. Default: exact f32.
    #[config(default = "HeadPrecision::Exact")]
    pub precision: HeadPrecision,
    /// The activation on the logits; see [`HeadActivation`]. Default: ReLU (the seed's model).
    /// `HeadActivation::Identity` makes the head `Linear` + `CrossEntropyLoss`.
    #[config(default = "HeadActivation::Relu")]
    pub activation: HeadActivation,
}

impl FusedHeadConfig {
    /// A head with W `[C, I]` and b `[C]` on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> FusedHead<B> {
        let fans = (Some(self.inputs), Some(self.classes));
        FusedHead {
            weight: self
                .initializer
                .init_with([self.classes, self.inputs], fans.0, fans.1, device),
            bias: self
                .bias_initializer
                .init_with([self.classes], fans.0, fans.1, device),
            precision: self.precision,
            activation: self.activation,
        }
    }
}

/// A classifier head trained with softmax cross-entropy: `H = act(X W^T + b)` (ReLU by default,
/// or the identity: see [`HeadActivation`]), loss
/// `mean_r cross_entropy(softmax(H[r]), labels[r])`, forward and backward fused.
///
/// Drop it in as the last layer of a model; it works with Burn's optimizers and recorders like
/// any module.
#[derive(Module, Debug)]
pub struct FusedHead<B: Backend> {
    /// W, stored `[C, I]`: one class's coefficients are contiguous.
    pub weight: Param<Tensor<B, 2>>,
    /// b, `[C]`.
    pub bias: Param<Tensor<B, 1>>,
    /// How the large-C products are computed (from the config; not part of the record).
    #[module(skip)]
    pub precision: HeadPrecision,
    /// The activation on the logits (from the config; not part of the record).
    #[module(skip)]
    pub activation: HeadActivation,
}

impl<B: FusedHeadBackend> FusedHead<B> {
    /// The mean cross-entropy loss of `x` `[B, I]` against `labels` `[B]`, shape `[1]`; any
    /// leading dims too, X `[d0, .., dk, I]` with labels `[d0, .., dk]`. See
    /// [`crate::linear_relu_cross_entropy`] for labels outside `[0, C)`, empty batches and panics.
    pub fn forward<const D: usize, const DL: usize>(
        &self,
        x: Tensor<B, D>,
        labels: Tensor<B, DL, Int>,
    ) -> Tensor<B, 1> {
        linear_relu_cross_entropy_with(
            x,
            self.weight.val(),
            self.bias.val(),
            labels,
            self.options(),
        )
    }

    /// The loss of `x` against `labels` under Burn's and PyTorch's cross-entropy options
    /// (ignored rows, class weights, label smoothing, mean / sum / per-row), with the head's
    /// options: `[1]`, or the per-row losses `[N]` for [`HeadReduction::None`](crate::HeadReduction).
    /// See [`crate::linear_relu_cross_entropy_loss`].
    pub fn forward_loss<const D: usize, const DL: usize>(
        &self,
        x: Tensor<B, D>,
        labels: Tensor<B, DL, Int>,
        loss: &crate::HeadLoss,
    ) -> Tensor<B, 1> {
        crate::linear_relu_cross_entropy_loss(
            x,
            self.weight.val(),
            self.bias.val(),
            labels,
            loss,
            self.options(),
        )
    }

    /// The loss, as [`forward`](Self::forward), and the predicted class of each row (the
    /// argmax over C of H, in the labels' shape), in one call: what a metric needs, without a
    /// second pass. See [`crate::linear_relu_cross_entropy_and_predictions`].
    pub fn forward_with_predictions<const D: usize, const DL: usize>(
        &self,
        x: Tensor<B, D>,
        labels: Tensor<B, DL, Int>,
    ) -> (Tensor<B, 1>, Tensor<B, DL, Int>) {
        linear_relu_cross_entropy_and_predictions_with(
            x,
            self.weight.val(),
            self.bias.val(),
            labels,
            self.options(),
        )
    }

    /// The head's output `H = act(X W^T + b)` (`X W^T + b` itself with the identity), `[B, C]`
    /// (or `[d0, .., dk, C]` for X `[d0, .., dk, I]`), with the head's options; its argmax over
    /// the last dim is the prediction. See [`crate::linear_relu_logits_with`].
    pub fn logits<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        linear_relu_logits_with(x, self.weight.val(), self.bias.val(), self.options())
    }

    /// The head's [`HeadOptions`]: its precision and activation.
    pub fn options(&self) -> HeadOptions {
        HeadOptions::new()
            .with_precision(self.precision)
            .with_activation(self.activation)
    }
}

#[cfg(feature = "train")]
impl<B: FusedHeadBackend> FusedHead<B> {
    /// burn-train's [`ClassificationOutput`](burn_train::ClassificationOutput) of `x` `[B, I]`
    /// against `labels` `[B]`, from one call of the op ([`forward_with_predictions`](Self::forward_with_predictions)):
    /// the loss, and as `output` the one-hot `[B, C]` (0 and 1, in the loss's dtype) of each
    /// row's predicted class. burn-train's `AccuracyMetric` takes the argmax of `output`, which is that class;
    /// metrics that read the scores themselves (top-k accuracy, calibration) need the head's
    /// [`logits`](Self::logits) instead, a second product. The one-hot is a `[B, C]` tensor:
    /// at a large C, prefer the predictions with a metric of your own.
    pub fn forward_classification(
        &self,
        x: Tensor<B, 2>,
        labels: Tensor<B, 1, Int>,
    ) -> burn_train::ClassificationOutput<B> {
        let classes = self.weight.dims()[0];
        let (loss, predictions) = self.forward_with_predictions(x, labels.clone());
        let output = if predictions.dims()[0] == 0 {
            // No fill kernel of zero cubes (CUDA refuses those launches; DESIGN.md).
            Tensor::empty([0, classes], (&loss.device(), loss.dtype()))
        } else {
            // [B, C] in the loss's float dtype (`float()` alone gives the device's default).
            predictions.one_hot::<2>(classes).float().cast(loss.dtype())
        };
        burn_train::ClassificationOutput::new(loss, output, labels)
    }
}
