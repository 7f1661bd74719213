//! The kernels on any CubeCL runtime: `CubeBackend<R, F, I, BT>` (CUDA, wgpu/Vulkan, ...).
//!
//! This file is the dispatch: which path runs for which shape and precision.
//!
//! | method | C <= 32 ([`small_classes`]) | C > 32 ([`large_classes`]) |
//! |---|---|---|
//! | `head_forward` | one fused kernel (stages 1, 2, loss sums), planes below B = 16384, one unit per row above; bf16 and f16 X read natively on CUDA, Z and dH kept in f32 ([`FusedHeadBackend::head_forward_state_dtype`]) | tiled Z and H, then one cube per row for the loss and dH, then the mean |
//! | `head_backward` | one fused kernel (stages 3 to 6, per-chunk dW and db), then the chunks' sums; bf16 and f16 X natively on CUDA, from f32 Z and dH | dZ, db, then dW and dX tiled (K split when the output has few tiles) |
//! | `head_step` (autodiff's training step, and the loss alone) | `head_forward`, then `head_backward` with g = 1 | the streamed path ([`streamed`]): chunk by chunk of rows, the products on cuBLASLt on CUDA (`cublaslt`) or the tiled kernels, no f32 `[B, C]` tensor (bf16's whole-batch mode keeps its dZ `[B, C]` in bf16) |
//! | `head_logits` | the forward's layouts, H only | the tiled forward, H only |
//!
//! With `HeadPrecision::Tf32` and a device with TF32 tensor cores, the three large-C products
//! run on them (cubek's TMA kernel where it takes the problem, [`cubek_tf32`], else our own
//! `cmma` kernels); the small-C path is memory-bound and always exact. The stage methods run
//! the stage kernels ([`stages`]), which the fast path never calls. Shared launch code
//! is in [`launch`]. The modules import downwards only: this file -> the paths (`streamed` uses
//! `large_classes::tiled_matmul` and, on CUDA, `cublaslt`) -> `cubek_tf32` -> `launch`.

mod cubek_tf32;
#[cfg(feature = "cuda")]
pub(crate) mod cublaslt;
mod half;
mod large_classes;
mod launch;
mod small_classes;
mod stages;
pub(crate) mod streamed;

use burn::tensor::ops::{FloatTensor, FloatTensorOps, IntTensor};
use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use crate::backend::{
    FusedHeadBackend, HeadForward, HeadGradients, HeadLimits, HeadStep, HeadStepOutput,
    HeadTokenStats, HeadWanted, KernelOptions, RowTerms, forward_then_backward, uniform_rows_step,
    unweighted_terms, weighted_step,
};
use crate::validate;
use half::{Full, up};
use launch::{cast, check, start_queued, tf32_available, use_tf32};

/// Up to this many classes, the fused small-C kernels run; above, the tiled ones. Invariant:
/// the small-C kernels keep C values per row (and 2 C N per unit in the backward) in unrolled
/// register arrays, and their shared memory is sized for C <= 32 (16 KiB of dZ stages).
const SMALL_CLASSES: usize = 32;

/// Whether the kernels take tensors of `dtypes` as compiled for the backend's float `F`: f32
/// tensors on an f32 backend. Otherwise the method goes through [`half`]. Refuses mixed or
/// unsupported dtypes first.
fn as_is<F: FloatElement>(op: &str, dtypes: &[DType]) -> bool {
    validate::float_dtypes(op, &launch::LIMITS, dtypes);
    F::dtype() == DType::F32 && dtypes[0] == DType::F32
}

/// Whether the small-C kernels read X of `dtype` natively at C = `classes` on the runtime `R`:
/// bf16 and f16 at C <= 32 on CUDA ([`small_classes::half_native`]). There `head_forward`
/// keeps Z and dH in f32 and `head_backward` takes them so.
fn half_small<R: CubeRuntime>(dtype: DType, classes: usize) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
        && classes <= SMALL_CLASSES
        && small_classes::half_native::<R>()
}

/// The streamed step on bf16 inputs, natively where cuBLASLt runs it and C > 32; the small-C
/// kernels on bf16 and f16 inputs read natively on CUDA at C <= 32
/// ([`small_classes::half_step`]); else (f16 inputs at C > 32) the f32 impl on the inputs as
/// f32 ([`half::loss_and_gradients`]). Also f32 inputs on a backend whose float is not f32.
fn other_dtype_step<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    inputs: [CubeTensor<R>; 4],
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> streamed::LossAndGradients<R, F, I, BT> {
    if inputs[0].dtype == DType::BF16
        && inputs[1].shape()[0] > SMALL_CLASSES
        && streamed::half_available(&inputs[0])
        && let Some(out) = streamed_step::<R, F, I, BT>(op, &inputs, wanted, kernels, predict, None)
    {
        return out;
    }
    let [x, weight, bias, labels] = &inputs;
    if matches!(x.dtype, DType::BF16 | DType::F16)
        && weight.shape()[0] <= SMALL_CLASSES
        && small_classes::half_native::<R>()
    {
        check_with_labels::<R>(op, x, weight, bias, labels);
        return small_classes::half_step::<R, F, I, BT>(op, inputs, wanted, kernels, predict);
    }
    half::loss_and_gradients::<R, F, I, BT>(inputs, wanted, kernels, predict)
}

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

    fn head_forward_state_dtype(dtype: DType, classes: usize) -> DType {
        if half_small::<R>(dtype, classes) {
            DType::F32
        } else {
            dtype
        }
    }

    fn head_step(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        targets: IntTensor<Self>,
        step: HeadStep<Self>,
        kernels: KernelOptions,
    ) -> HeadStepOutput<Self> {
        let op = "head_step";
        let (wanted, predict) = (step.wanted, step.predictions);
        let inputs = [x, weight, bias, targets];
        match step.row_weights {
            // The terms change nothing on an empty batch (NaN mean, zero gradients); the
            // statistics are still given (empty).
            None if step.terms.is_plain()
                || (inputs[0].shape()[0] == 0 && !step.terms.token_stats) =>
            {
                unweighted_terms(op, &step.terms);
                let (loss, gradients, predictions, _) =
                    training_step::<R, F, I, BT>(op, inputs, wanted, kernels, predict);
                HeadStepOutput {
                    loss,
                    gradients,
                    predictions,
                    token_stats: None,
                }
            }
            None => {
                // A logit scale, a softcap, a z-loss and the statistics: the streamed path
                // takes them without row weights (its loss the mean, as the plain step's, the
                // z-term in each row's loss); elsewhere each row weighs 1/B.
                unweighted_terms(op, &step.terms);
                let terms = step.terms;
                if native::<R, F>(op, [&inputs[0], &inputs[1], &inputs[2]])
                    && let Some((loss, gradients, predictions, stats)) = streamed_step::<R, F, I, BT>(
                        op,
                        &inputs,
                        wanted,
                        kernels,
                        predict,
                        Some(Weights {
                            rho: None,
                            z: None,
                            terms,
                        }),
                    )
                {
                    let token_stats = stats.map(|s| unweighted_stats::<R, F, I, BT>(s, terms));
                    return HeadStepOutput {
                        loss,
                        gradients,
                        predictions,
                        token_stats,
                    };
                }
                let [x, weight, bias, targets] = inputs;
                uniform_rows_step::<Self>([x, weight, bias], targets, step, kernels)
            }
            Some(rho) => {
                let weights = (rho, step.z_weights, step.terms);
                weighted_training_step::<R, F, I, BT>(op, inputs, weights, wanted, kernels, predict)
            }
        }
    }

    fn head_linear_relu_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !as_is::<F>("linear_relu_forward", &[x.dtype, weight.dtype, bias.dtype]) {
            let dtype = x.dtype;
            let (z, h) = Full::<R, I, BT>::head_linear_relu_forward(up(x), up(weight), up(bias));
            return (cast(z, dtype), cast(h, dtype));
        }
        stages::linear_relu_forward::<R, F>(x, weight, bias)
    }

    fn head_softmax_cross_entropy(
        h: FloatTensor<Self>,
        labels: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !as_is::<F>("softmax_cross_entropy", &[h.dtype]) {
            let dtype = h.dtype;
            let (loss_rows, dh) = Full::<R, I, BT>::head_softmax_cross_entropy(up(h), labels);
            return (cast(loss_rows, dtype), cast(dh, dtype));
        }
        stages::softmax_cross_entropy::<R, F>(h, labels)
    }

    fn head_relu_backward(
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        if !as_is::<F>("relu_backward", &[z.dtype, dh.dtype, grad_loss.dtype]) {
            let dtype = z.dtype;
            let dz = Full::<R, I, BT>::head_relu_backward(up(z), up(dh), up(grad_loss));
            return cast(dz, dtype);
        }
        stages::relu_backward::<R, F>(z, dh, grad_loss)
    }

    fn head_weight_gradient(dz: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        if !as_is::<F>("weight_gradient", &[dz.dtype, x.dtype]) {
            let dtype = dz.dtype;
            return cast(Full::<R, I, BT>::head_weight_gradient(up(dz), up(x)), dtype);
        }
        stages::weight_gradient::<R, F>(dz, x)
    }

    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        if !as_is::<F>("bias_gradient", &[dz.dtype]) {
            let dtype = dz.dtype;
            return cast(Full::<R, I, BT>::head_bias_gradient(up(dz)), dtype);
        }
        stages::bias_gradient::<R, F>(dz)
    }

    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        if !as_is::<F>("input_gradient", &[dz.dtype, weight.dtype]) {
            let dtype = dz.dtype;
            return cast(
                Full::<R, I, BT>::head_input_gradient(up(dz), up(weight)),
                dtype,
            );
        }
        stages::input_gradient::<R, F>(dz, weight)
    }

    fn head_sum(values: FloatTensor<Self>) -> FloatTensor<Self> {
        // The options' sums are f32 here (the CubeCL backends take no f64).
        if values.dtype == DType::F32 && values.shape()[0] > 0 {
            launch::pairwise_sum::<R, f32>(values)
        } else {
            crate::backend::stock_sum::<Self>(values)
        }
    }

    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        if !as_is::<F>("mean_loss", &[loss_rows.dtype]) {
            let dtype = loss_rows.dtype;
            return cast(Full::<R, I, BT>::head_mean_loss(up(loss_rows)), dtype);
        }
        stages::mean_loss::<R, F>(loss_rows)
    }

    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        kernels: KernelOptions,
    ) -> FloatTensor<Self> {
        let op = "head_logits";
        if !as_is::<F>(op, &[x.dtype, weight.dtype, bias.dtype]) {
            let dtype = x.dtype;
            let kernels = half::for_f32(kernels, dtype);
            let h = Full::<R, I, BT>::head_logits(up(x), up(weight), up(bias), kernels);
            return cast(h, dtype);
        }
        check::<R>(op, &[&x, &weight, &bias]);
        let (_batch, _inputs, classes) =
            validate::linear_shapes(op, &x.shape(), &weight.shape(), &bias.shape());
        let h = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(kernels.precision, &x);
            large_classes::logits::<R, F>(x, weight, bias, tf32, kernels.relu())
        } else {
            small_classes::logits::<R, F>(x, weight, bias, kernels.relu())
        };
        start_queued::<R>(&h.device);
        h
    }

    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        kernels: KernelOptions,
    ) -> HeadForward<Self> {
        let op = "head_forward";
        if !as_is::<F>(op, &[x.dtype, weight.dtype, bias.dtype]) {
            if matches!(x.dtype, DType::BF16 | DType::F16) && small_classes::half_native::<R>() {
                let (_, _, classes) = check_with_labels::<R>(op, &x, &weight, &bias, &labels);
                if half_small::<R>(x.dtype, classes) {
                    let dtype = x.dtype;
                    let inputs = [x, weight, bias, labels];
                    let (loss, z, dh) =
                        small_classes::half_forward::<R, I, BT>(op, inputs, kernels.relu());
                    start_queued::<R>(&loss.device);
                    let loss = cast(loss, dtype);
                    return HeadForward { loss, z, dh };
                }
            }
            return half::forward::<R, F, I, BT>(x, weight, bias, labels, kernels);
        }
        let (_batch, _inputs, classes) = check_with_labels::<R>(op, &x, &weight, &bias, &labels);
        let (loss, z, dh) = if classes > SMALL_CLASSES {
            let tf32 = use_tf32(kernels.precision, &x);
            large_classes::forward::<R, F>(op, x, weight, bias, labels, tf32, kernels.relu())
        } else {
            small_classes::forward::<R, F, F>(op, x, weight, bias, labels, kernels.relu())
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
        kernels: KernelOptions,
    ) -> HeadGradients<Self> {
        let op = "head_backward";
        // bf16 and f16 at C <= 32 on CUDA: Z and dH in f32, as `head_forward` kept them.
        let w_shape = weight.shape();
        let classes = if w_shape.num_dims() == 2 {
            w_shape[0]
        } else {
            0
        };
        let half_state =
            half_small::<R>(x.dtype, classes) && [z.dtype, dh.dtype] == [DType::F32, DType::F32];
        let grad_loss = if half_state { up(grad_loss) } else { grad_loss };
        if half_state {
            // X and W of one dtype; Z, dH and g (widened: the kernel reads it as f32) f32,
            // all on X's device.
            check::<R>(op, &[&x, &weight]);
            check::<R>(op, &[&z, &dh, &grad_loss]);
            x.assert_is_on_same_device(&z);
        } else {
            let dtypes = [x.dtype, weight.dtype, z.dtype, dh.dtype, grad_loss.dtype];
            if !as_is::<F>(op, &dtypes) {
                return half::backward::<R, F, I, BT>(x, weight, z, dh, grad_loss, wanted, kernels);
            }
            check::<R>(op, &[&x, &weight, &z, &dh, &grad_loss]);
        }
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
        let grads = if half_state {
            let relu = kernels.relu();
            small_classes::half_backward::<R, F, I, BT>(
                op, x, weight, z, dh, grad_loss, wanted, relu,
            )
        } else if classes > SMALL_CLASSES {
            let tf32 = use_tf32(kernels.precision, &x);
            large_classes::backward(x, weight, z, dh, grad_loss, wanted, tf32, kernels.relu())
        } else {
            small_classes::backward::<R, F, F, I, BT>(
                x,
                weight,
                z,
                dh,
                grad_loss,
                wanted,
                kernels.relu(),
            )
        };
        start_queued::<R>(&device);
        grads
    }
}

/// The statistics of a streamed step without row weights: the log-sum-exp and the entropy as
/// the row kernel wrote them, the target's log-probability `-ce` from each row's loss `l`:
/// `-l`, or with a z-loss (in `l` there) `zeta lse^2 - l`, the z-term in the kernel's order.
/// That difference is off from `-ce` by f32 roundings of `l`'s and the z-term's size (the
/// kernel may fuse its `ce + zeta lse^2` into one rounding, the host rounds the z-term apart):
/// within the gate where the z-term is not orders of magnitude above the cross-entropy, and
/// where it is, a target that takes nearly all the probability can come out slightly above 0.
fn unweighted_stats<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    [lse, entropy, loss]: streamed::RowStats<R>,
    terms: RowTerms,
) -> HeadTokenStats<CubeBackend<R, F, I, BT>> {
    type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
    let target_log_prob = if terms.z_loss != 0.0 {
        // `(zeta lse) lse`, the row kernel's order.
        let scaled = B::<R, F, I, BT>::float_mul_scalar(lse.clone(), terms.z_loss.into());
        let z_term = B::<R, F, I, BT>::float_mul(scaled, lse.clone());
        B::<R, F, I, BT>::float_sub(z_term, loss)
    } else {
        B::<R, F, I, BT>::float_neg(loss)
    };
    HeadTokenStats {
        log_sum_exp: lse,
        target_log_prob,
        entropy,
    }
}

/// The training step (the loss, the gradients of a unit upstream gradient and, with `predict`,
/// the predictions): inputs of another dtype through [`other_dtype_step`], else the streamed
/// path where it applies, else the forward kernels then the backward ones.
fn training_step<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    inputs: [CubeTensor<R>; 4],
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> streamed::LossAndGradients<R, F, I, BT> {
    if !as_is::<F>(op, &[inputs[0].dtype, inputs[1].dtype, inputs[2].dtype]) {
        return other_dtype_step(op, inputs, wanted, kernels, predict);
    }
    if let Some(out) = streamed_step::<R, F, I, BT>(op, &inputs, wanted, kernels, predict, None) {
        return out;
    }
    let [x, weight, bias, labels] = inputs;
    let out = forward_then_backward::<CubeBackend<R, F, I, BT>>(
        [x, weight, bias],
        labels,
        wanted,
        kernels,
        predict,
    );
    (out.loss, out.gradients, out.predictions, None)
}

/// The training step with each row's weight `rho` `[B]` (f32), z-weights and LM terms (see
/// [`HeadStep`]): the per-row losses `[B]` (unweighted) and the gradients of
/// `sum_r rho[r] loss[r]` (plus the z-term), natively streamed for f32 inputs as compiled or
/// bf16 ones where cuBLASLt runs them, other inputs (f16 always) through the f32 impl, which
/// streams them; the materialized path where nothing streams (C <= 32, an empty product).
fn weighted_training_step<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    inputs: [CubeTensor<R>; 4],
    (rho, z_weights, terms): (CubeTensor<R>, Option<CubeTensor<R>>, RowTerms),
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> HeadStepOutput<CubeBackend<R, F, I, BT>> {
    let [x, weight, bias, labels] = inputs;
    assert!(terms.smoothing == 0.0, "{op}: smoothing does not stream");
    // The row kernel reads rho and the z-weights [B] as f32 without bounds checks.
    let batch = x.shape()[0];
    let z_weights = z_weights.filter(|_| terms.z_loss != 0.0);
    assert!(
        terms.z_loss == 0.0 || z_weights.is_some(),
        "{op}: a z-loss needs z-weights"
    );
    for (what, w) in [
        ("row weights", Some(&rho)),
        ("z-weights", z_weights.as_ref()),
    ] {
        let Some(w) = w else { continue };
        validate::same_shape(op, what, &w.shape(), "[B]", &[batch]);
        assert!(
            w.dtype == DType::F32,
            "{op}: the {what} must be f32, got {:?}",
            w.dtype
        );
        x.assert_is_on_same_device(w);
    }
    let native = native::<R, F>(op, [&x, &weight, &bias]);
    let inputs = [x, weight, bias, labels];
    let weights = Weights {
        rho: Some(rho.clone()),
        z: z_weights.clone(),
        terms,
    };
    if native
        && let Some((loss, gradients, predictions, stats)) =
            streamed_step::<R, F, I, BT>(op, &inputs, wanted, kernels, predict, Some(weights))
    {
        // -l, the target's log-probability, from the cross-entropy rows.
        let token_stats = stats.map(|[lse, entropy, _loss]| HeadTokenStats {
            log_sum_exp: lse,
            target_log_prob: CubeBackend::<R, F, I, BT>::float_neg(loss.clone()),
            entropy,
        });
        return HeadStepOutput {
            loss,
            gradients,
            predictions,
            token_stats,
        };
    }
    if !native {
        // The f32 impl on the inputs as f32 (f16's dZ never rounded to f16), streamed at
        // C > 32, as the step without row weights (`other_dtype_step`).
        return half::weighted_training_step::<R, F, I, BT>(
            inputs,
            (rho, z_weights, terms),
            wanted,
            kernels,
            predict,
        );
    }
    let [x, weight, bias, labels] = inputs;
    weighted_step::<CubeBackend<R, F, I, BT>>(
        [x, weight, bias],
        labels,
        (rho, z_weights, terms),
        wanted,
        kernels,
        predict,
    )
}

/// Whether the streamed path runs inputs of X's dtype natively (with row weights or LM
/// terms): f32 inputs as compiled, or bf16 where cuBLASLt runs them. The others go through
/// the f32 impl.
/// Checks that X, W and b share one supported dtype first.
fn native<R: CubeRuntime, F: FloatElement>(
    op: &str,
    [x, weight, bias]: [&CubeTensor<R>; 3],
) -> bool {
    as_is::<F>(op, &[x.dtype, weight.dtype, bias.dtype])
        || (x.dtype == DType::BF16 && streamed::half_available(x))
}

/// The streamed path's row weights `rho` (none: each row weighs `1/B` and the loss is the
/// mean, for a logit scale, a softcap and a z-loss alone), the z-weights, the LM terms.
struct Weights<R: CubeRuntime> {
    rho: Option<CubeTensor<R>>,
    z: Option<CubeTensor<R>>,
    terms: RowTerms,
}

/// The streamed path on X, W, b and the labels (checked here) where it applies: C > 32, and a
/// product to stream (an empty batch or I = 0 has none; the forward and backward kernels
/// handle both with no [B, C] of any size worth saving). `None` elsewhere.
fn streamed_step<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    op: &str,
    inputs: &[CubeTensor<R>; 4],
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
    weights: Option<Weights<R>>,
) -> Option<streamed::LossAndGradients<R, F, I, BT>> {
    let [x, weight, bias, labels] = inputs;
    let (batch, inputs_dim, classes) = check_with_labels::<R>(op, x, weight, bias, labels);
    if classes <= SMALL_CLASSES || batch == 0 || inputs_dim == 0 {
        return None;
    }
    let tf32 = use_tf32(kernels.precision, x);
    let device = x.device.clone();
    let (rho, z, terms) = match weights {
        Some(w) => (w.rho, w.z, w.terms),
        None => (None, None, RowTerms::new(kernels.activation)),
    };
    let out = streamed::loss_and_gradients::<R, F, I, BT>(
        op,
        inputs.clone(),
        wanted,
        streamed::Settings {
            tf32,
            relu: kernels.relu(),
            chunk_elements: kernels.chunk_elements,
            lean: kernels.accumulation == crate::HeadAccumulation::Lean,
            rounded: kernels.logits == crate::HeadLogits::Rounded,
            terms,
        },
        predict,
        rho,
        z,
    );
    start_queued::<R>(&device);
    Some(out)
}

/// The checks of an op on X, W, b and the labels, before anything runs: dtypes, devices,
/// sizes and shapes (labels `[B]`). Returns `(B, I, C)`.
fn check_with_labels<R: CubeRuntime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: &CubeTensor<R>,
    labels: &CubeTensor<R>,
) -> (usize, usize, usize) {
    check::<R>(op, &[x, weight, bias]);
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
