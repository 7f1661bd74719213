//! Tensors the kernels do not take as compiled for the backend's float `F`: bf16 and f16 inputs,
//! and f32 inputs on a backend whose float is not f32 (`CubeBackend<R, bf16, ..>` with an f32
//! tensor). Each goes through the f32 impl ([`Full`]).
//!
//! f16 runs the f32 impl everywhere, its products exact, and never rounds dZ to f16:
//! `dZ = (p - onehot) / B` falls below f16's range at large B (at B = 8192 a probability under
//! 5e-4 gives a dZ below f16's smallest subnormal), and rounded it would zero most of dW. So
//! `Autodiff` runs the training step with the gradients in the forward pass for f16 inputs
//! except at C <= 32 on CUDA (it keeps no dH; there the forward keeps Z and dH in f32, below),
//! and the step never makes the f16 copy of dZ that bf16's native path makes (bf16 has f32's
//! exponent range). `head_forward` called directly on f16 tensors returns dH in the dtype that
//! `head_forward_state_dtype` names: f32 at C <= 32 on CUDA, else rounded to f16. With row
//! weights (loss options, LM terms), f16 inputs take the same route ([`weighted_training_step`]):
//! the f32 impl, its streamed path at C > 32. (Until 2026-12-03 they took the materialized path,
//! holding Z `[B, C]`; so did bf16 inputs with row weights where cuBLASLt does not run, which now
//! take the f32 impl as bf16 does without them.)
//!
//! - The training step at C > 32 (`head_step`, with or without predictions) on bf16 inputs runs
//!   natively where cuBLASLt loads (f16 inputs: below): the streamed path with products on bf16
//!   operands accumulating in f32 (see [`super::streamed`]). Its memory: P's f32 chunk buffer, a
//!   chunk buffer of dZ in bf16 (half P's size), and dW and db in f32 until they are rounded at the
//!   end (`4 C (I + 1)` bytes).
//! - At C <= 32 on CUDA, `head_forward`, `head_backward` and `head_step` on bf16 and f16 inputs run
//!   the small-C kernels on X as it is, widened to f32 where it is summed, dX written in X's type
//!   (`small_classes::{half_forward, half_backward, half_step}`); W, b and the upstream gradient
//!   are widened to f32, Z and dH stay f32 (`head_forward` returns them so:
//!   `head_forward_state_dtype`), dW and db are rounded once.
//! - Everything else (the forward and backward halves at C > 32, the logits, the stage methods, and
//!   every method on wgpu or, at C > 32, where cuBLASLt does not load) converts the float inputs to
//!   f32, runs the f32 kernels and rounds the float outputs to the inputs' type. The saved `Z` and
//!   `dH` of `head_forward` are rounded too, as any bf16 tensor is. The precision is `Exact` there
//!   whatever `HeadPrecision` says (it applies to f32 tensors).
//!
//! Either way the result is the f32 computation on the inputs' values up to the rounding of the
//! outputs (and of dZ as the gradients' operand): the half-precision gate (DESIGN.md, "bf16") is
//! the bound.

use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::launch::cast;
use crate::backend::{
    FusedHeadBackend, HeadForward, HeadGradients, HeadStep, HeadStepOutput, HeadTokenStats,
    HeadWanted, KernelOptions, RowTerms,
};
use crate::options::HeadPrecision;

/// The f32 impl every other float dtype goes through.
pub(super) type Full<R, I, BT> = CubeBackend<R, f32, I, BT>;

/// `kernels` for the f32 impl on inputs of `dtype`: exact products for bf16 inputs (their
/// dZ would otherwise be a TF32 operand), as given for f32 ones.
pub(super) fn for_f32(kernels: KernelOptions, dtype: DType) -> KernelOptions {
    match dtype {
        DType::F32 => kernels,
        _ => kernels.with_precision(HeadPrecision::Exact),
    }
}

/// `t` as f32.
pub(super) fn up<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
    cast(t, DType::F32)
}

/// The gradients of the f32 impl rounded to `dtype`.
pub(super) fn grads_to<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    grads: HeadGradients<Full<R, I, BT>>,
    dtype: DType,
) -> HeadGradients<CubeBackend<R, F, I, BT>> {
    HeadGradients {
        x: grads.x.map(|t| cast(t, dtype)),
        weight: grads.weight.map(|t| cast(t, dtype)),
        bias: grads.bias.map(|t| cast(t, dtype)),
    }
}

/// `head_step` (no row weights) of the f32 impl on X, W and b as f32, the loss and gradients
/// rounded to X's dtype.
pub(super) fn loss_and_gradients<
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    inputs: [CubeTensor<R>; 4],
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> super::streamed::LossAndGradients<R, F, I, BT> {
    let dtype = inputs[0].dtype;
    let step = HeadStep::loss()
        .with_wanted(wanted)
        .with_predictions(predict);
    let out = step_in_f32::<R, F, I, BT>(inputs, step, kernels);
    (cast(out.loss, dtype), out.gradients, out.predictions, None)
}

/// `head_step` with row weights `rho`, z-weights and LM `terms` of the f32 impl on X, W and b
/// as f32: the per-row losses and the statistics in f32 as the f32 impl gives them (the sums'
/// dtype of every float input but f64), the gradients rounded to X's dtype.
pub(super) fn weighted_training_step<
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    inputs: [CubeTensor<R>; 4],
    (rho, z_weights, terms): (CubeTensor<R>, Option<CubeTensor<R>>, RowTerms),
    wanted: HeadWanted,
    kernels: KernelOptions,
    predict: bool,
) -> HeadStepOutput<CubeBackend<R, F, I, BT>> {
    let mut step = HeadStep::loss()
        .with_wanted(wanted)
        .with_predictions(predict)
        .with_row_weights(rho)
        .with_terms(terms);
    if let Some(z) = z_weights {
        step = step.with_z_weights(z);
    }
    step_in_f32::<R, F, I, BT>(inputs, step, kernels)
}

/// `step` of the f32 impl on X, W and b as f32 (exact products for inputs that are not f32):
/// its loss, predictions and statistics as it gives them, the gradients rounded to X's dtype.
fn step_in_f32<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    [x, weight, bias, labels]: [CubeTensor<R>; 4],
    step: HeadStep<Full<R, I, BT>>,
    kernels: KernelOptions,
) -> HeadStepOutput<CubeBackend<R, F, I, BT>> {
    let dtype = x.dtype;
    let kernels = for_f32(kernels, dtype);
    let out = Full::<R, I, BT>::head_step(up(x), up(weight), up(bias), labels, step, kernels);
    HeadStepOutput {
        loss: out.loss,
        gradients: grads_to(out.gradients, dtype),
        predictions: out.predictions,
        token_stats: out.token_stats.map(|s| HeadTokenStats {
            log_sum_exp: s.log_sum_exp,
            target_log_prob: s.target_log_prob,
            entropy: s.entropy,
        }),
    }
}

/// `head_forward` of the f32 impl, its outputs rounded to X's dtype.
pub(super) fn forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    labels: CubeTensor<R>,
    kernels: KernelOptions,
) -> HeadForward<CubeBackend<R, F, I, BT>> {
    let dtype = x.dtype;
    let kernels = for_f32(kernels, dtype);
    let out = Full::<R, I, BT>::head_forward(up(x), up(weight), up(bias), labels, kernels);
    HeadForward {
        loss: cast(out.loss, dtype),
        z: cast(out.z, dtype),
        dh: cast(out.dh, dtype),
    }
}

/// `head_backward` of the f32 impl, the gradients rounded to X's dtype.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    wanted: HeadWanted,
    kernels: KernelOptions,
) -> HeadGradients<CubeBackend<R, F, I, BT>> {
    let dtype = x.dtype;
    let kernels = for_f32(kernels, dtype);
    let grads = Full::<R, I, BT>::head_backward(
        up(x),
        up(weight),
        up(z),
        up(dh),
        up(grad_loss),
        wanted,
        kernels,
    );
    grads_to(grads, dtype)
}
