//! The kernels on any CubeCL runtime: `CubeBackend<R, F, I, BT>` (CUDA, wgpu/Vulkan, ...).
//!
//! This file is the dispatch: which path runs for which shape and precision.
//!
//! | method | C <= 32 ([`small_classes`]) | C > 32 ([`large_classes`]) |
//! |---|---|---|
//! | `head_forward` | one fused kernel (stages 1, 2, loss sums), planes below B = 16384, one unit per row above | tiled Z and H, then one cube per row for the loss and dH, then the mean |
//! | `head_backward` | one fused kernel (stages 3 to 6, per-chunk dW and db), then the chunks' sums | dZ, db, then dW and dX tiled (K split when the output has few tiles) |
//! | `head_loss_and_gradients` (autodiff's training step, and the loss alone) | `head_forward`, then `head_backward` with g = 1 | the streamed path ([`streamed`]): chunk by chunk of rows, the products on cuBLASLt on CUDA (`cublaslt`) or the tiled kernels, no `[B, C]` tensor |
//! | `head_logits` | the forward's layouts, H only | the tiled forward, H only |
//!
//! With `HeadPrecision::Tf32` and a device with TF32 tensor cores, the three large-C products
//! run on them (cubek's TMA kernel where it takes the problem, [`cubek_tf32`], else our own
//! `cmma` kernels); the small-C path is memory-bound and always exact. The stage methods run
//! the reference kernels ([`reference`]), which the fast path never calls. Shared launch code
//! is in [`launch`]. The modules import downwards only: this file -> the paths (`streamed` uses
//! `large_classes::tiled_matmul` and, on CUDA, `cublaslt`) -> `cubek_tf32` -> `launch`.

mod cubek_tf32;
#[cfg(feature = "cuda")]
mod cublaslt;
mod large_classes;
mod launch;
mod reference;
mod small_classes;
pub(crate) mod streamed;

use burn::tensor::TensorMetadata;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use crate::backend::{
    FusedHeadBackend, HeadForward, HeadGradients, HeadLimits, HeadOptions, HeadWanted,
    forward_then_backward,
};
use crate::validate;
use launch::{check, start_queued, tf32_available, use_tf32};

/// Up to this many classes, the fused small-C kernels run; above, the tiled ones. Invariant:
/// the small-C kernels keep C values per row (and 2 C N per unit in the backward) in unrolled
/// register arrays, and their shared memory is sized for C <= 32 (16 KiB of dZ stages).
const SMALL_CLASSES: usize = 32;

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FusedHeadBackend
    for CubeBackend<R, F, I, BT>
{
    fn head_limits() -> HeadLimits {
        launch::LIMITS
    }

    fn head_tf32_available(device: &Self::Device) -> bool {
        tf32_available::<R>(&R::client(device))
    }

    fn head_gradients_in_forward(_batch: usize, _inputs: usize, classes: usize) -> bool {
        classes > SMALL_CLASSES
    }

    fn head_loss_and_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>) {
        let op = "head_loss_and_gradients";
        let inputs = [x, weight, bias, labels];
        match streamed_step::<R, F, I, BT>(op, &inputs, wanted, options, false) {
            Some((loss, grads, _)) => (loss, grads),
            None => {
                let [x, weight, bias, labels] = inputs;
                let inputs = [x, weight, bias];
                let (loss, grads, _) =
                    forward_then_backward::<Self>(inputs, labels, wanted, options, false);
                (loss, grads)
            }
        }
    }

    fn head_loss_gradients_and_predictions(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>, IntTensor<Self>) {
        let op = "head_loss_gradients_and_predictions";
        let inputs = [x, weight, bias, labels];
        match streamed_step::<R, F, I, BT>(op, &inputs, wanted, options, true) {
            Some((loss, grads, predictions)) => {
                (loss, grads, predictions.expect("predictions asked for"))
            }
            None => {
                let [x, weight, bias, labels] = inputs;
                let inputs = [x, weight, bias];
                let (loss, grads, predictions) =
                    forward_then_backward::<Self>(inputs, labels, wanted, options, true);
                (loss, grads, predictions.expect("predictions asked for"))
            }
        }
    }

    fn head_linear_relu_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference::linear_relu_forward::<R, F>(x, weight, bias)
    }

    fn head_softmax_cross_entropy(
        h: FloatTensor<Self>,
        labels: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference::softmax_cross_entropy::<R, F>(h, labels)
    }

    fn head_relu_backward(
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        reference::relu_backward::<R, F>(z, dh, grad_loss)
    }

    fn head_weight_gradient(dz: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::weight_gradient::<R, F>(dz, x)
    }

    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::bias_gradient::<R, F>(dz)
    }

    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::input_gradient::<R, F>(dz, weight)
    }

    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::mean_loss::<R, F>(loss_rows)
    }

    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: HeadOptions,
    ) -> FloatTensor<Self> {
        let op = "head_logits";
        check::<R, F>(op, &[&x, &weight, &bias]);
        let (_batch, _inputs, classes) =
            validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
        let h = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(options.precision, &x);
            large_classes::logits::<R, F>(x, weight, bias, tf32, options.relu())
        } else {
            small_classes::logits::<R, F>(x, weight, bias, options.relu())
        };
        start_queued::<R>(&h.device);
        h
    }

    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        options: HeadOptions,
    ) -> HeadForward<Self> {
        let op = "head_forward";
        let (_batch, _inputs, classes) = check_with_labels::<R, F>(op, &x, &weight, &bias, &labels);
        let (loss, z, dh) = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(options.precision, &x);
            large_classes::forward::<R, F>(op, x, weight, bias, labels, tf32, options.relu())
        } else {
            small_classes::forward::<R, F>(op, x, weight, bias, labels, options.relu())
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
        options: HeadOptions,
    ) -> HeadGradients<Self> {
        let op = "head_backward";
        check::<R, F>(op, &[&x, &weight, &z, &dh, &grad_loss]);
        let [batch, _inputs] = validate::rank2(op, "X [B, I]", &x.shape());
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
        let device = x.device.clone();
        let grads = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(options.precision, &x);
            large_classes::backward(x, weight, z, dh, grad_loss, wanted, tf32, options.relu())
        } else {
            small_classes::backward(x, weight, z, dh, grad_loss, wanted, options.relu())
        };
        start_queued::<R>(&device);
        grads
    }
}

/// The streamed path on X, W, b and the labels (checked here) where it applies: C > 32, and a
/// product to stream (an empty batch or I = 0 has none; the forward and backward kernels
/// handle both with no [B, C] of any size worth saving). `None` elsewhere.
fn streamed_step<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    inputs: &[CubeTensor<R>; 4],
    wanted: HeadWanted,
    options: HeadOptions,
    predict: bool,
) -> Option<streamed::LossAndGradients<R, F, I, BT>> {
    let [x, weight, bias, labels] = inputs;
    let (batch, inputs_dim, classes) = check_with_labels::<R, F>(op, x, weight, bias, labels);
    if classes <= SMALL_CLASSES || batch == 0 || inputs_dim == 0 {
        return None;
    }
    let tf32 = use_tf32(options.precision, x);
    let device = x.device.clone();
    let out = streamed::loss_and_gradients::<R, F, I, BT>(
        op,
        inputs.clone(),
        wanted,
        tf32,
        options.relu(),
        predict,
    );
    start_queued::<R>(&device);
    Some(out)
}

/// The checks of an op on X, W, b and the labels, before anything runs: dtypes, devices,
/// sizes and shapes (labels `[B]`). Returns `(B, I, C)`.
fn check_with_labels<R: CubeRuntime, F: FloatElement>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: &CubeTensor<R>,
    labels: &CubeTensor<R>,
) -> (usize, usize, usize) {
    check::<R, F>(op, &[x, weight, bias]);
    x.assert_is_on_same_device(labels);
    let dims = validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
    validate::same_dim(
        op,
        "labels must be [B]",
        &x.shape(),
        &labels.shape(),
        (0, 0),
    );
    dims
}
