//! `Autodiff<B, C>`: the op ([`FusedHeadBackend::head_cross_entropy`]) as B's fused forward
//! and one backward step. Where B computes the gradients in the forward pass
//! ([`FusedHeadBackend::head_gradients_in_forward`], the CubeCL backends at C > 32; and
//! half-precision inputs where B keeps no f32 Z and dH for them,
//! [`FusedHeadBackend::head_forward_state_dtype`]), the step scales them by the upstream
//! gradient (or, where it is exactly 1, takes them as they are); elsewhere it runs B's fused
//! backward (stages 3 to 6) from the Z and dH the forward pass kept. The predictions come from
//! the same forward call and are never tracked.

use burn::backend::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::ops::{BoolTensor, FloatTensor, IntTensor};
use burn::tensor::{DType, TensorMetadata};

use crate::backend::{
    FusedHeadBackend, HeadExtraOutputs, HeadExtras, HeadGradients, HeadLimits, HeadStep,
    HeadTokenStats, HeadWanted, KernelOptions, RowTerms, forward_with_rows, materialized,
    materialized_backward, predictions_of, streamed_rows, streams,
};
use crate::options::{HeadOptions, HeadReduction};
use crate::rows::{denominator, reduce, row_upstream, rows, sums_dtype};

/// The op and the logits are overridden: the stages keep their stock-op bodies on `Autodiff`,
/// which autodiff differentiates as usual, so calling a stage on tracked tensors stays correct.
impl<B: FusedHeadBackend, C: CheckpointStrategy> FusedHeadBackend for Autodiff<B, C> {
    fn head_limits() -> HeadLimits {
        B::head_limits()
    }

    fn head_tf32_available(device: &Self::Device) -> bool {
        B::head_tf32_available(device)
    }

    fn head_gradients_in_forward(batch: usize, inputs: usize, classes: usize) -> bool {
        B::head_gradients_in_forward(batch, inputs, classes)
    }

    fn head_products_in_f64() -> bool {
        B::head_products_in_f64()
    }

    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        kernels: KernelOptions,
    ) -> FloatTensor<Self> {
        logits::<B, C>([x, weight, bias], kernels)
    }

    fn head_cross_entropy(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        targets: IntTensor<Self>,
        options: &HeadOptions,
        extras: HeadExtras,
    ) -> (FloatTensor<Self>, HeadExtraOutputs<Self>) {
        let (loss, outputs) = if options.is_plain() && !extras.token_stats {
            let kernels = options.kernels();
            let (loss, predictions) =
                tracked::<B, C>(x, weight, bias, targets, kernels, extras.predictions);
            (loss, HeadExtraOutputs::predictions(predictions))
        } else if let Some(terms) = streamed_unweighted::<B, C>(&x, &weight, options, extras) {
            // A logit scale, a softcap or a z-loss (and the statistics), streamed: the plain
            // step's route, the terms and the statistics in its row kernel, no row weight
            // built (`HeadStep::terms`).
            let kernels = options.kernels();
            let predict = extras.predictions;
            gradients_in_forward::<B, C>(x, weight, bias, targets, kernels, predict, terms)
        } else {
            with_options::<B, C>([x, weight, bias], targets, options, extras)
        };
        // The extras are never tracked: B's tensors, as Autodiff's own int tensors are, and
        // the statistics as untracked floats.
        let token_stats = outputs.token_stats.map(|s| HeadTokenStats {
            log_sum_exp: untracked_float::<B, C>(s.log_sum_exp),
            target_log_prob: untracked_float::<B, C>(s.target_log_prob),
            entropy: untracked_float::<B, C>(s.entropy),
        });
        (
            loss,
            HeadExtraOutputs {
                predictions: outputs.predictions,
                token_stats,
            },
        )
    }
}

/// The logits `H = act(X W^T + b)` `[B, C]` from B's kernels (exact or TF32 as `kernels`
/// say), tracked: for the upstream gradient G of H, the backward step is B's fused backward
/// with `dH = G` and a unit upstream gradient, `dZ = G act'(Z)`, then dW, db and dX. H stands
/// for Z in ReLU's mask: `H > 0` exactly where `Z > 0` (a NaN Z gives a NaN H, neither
/// positive), and the identity's H is Z.
fn logits<B: FusedHeadBackend, C: CheckpointStrategy>(
    [x, weight, bias]: [FloatTensor<Autodiff<B, C>>; 3],
    kernels: KernelOptions,
) -> FloatTensor<Autodiff<B, C>> {
    /// The backward step, with the forward pass's kernel options.
    #[derive(Debug)]
    struct LogitsBackward(KernelOptions);

    impl<B: FusedHeadBackend> Backward<B, 3> for LogitsBackward {
        /// X and W as checkpointed parents, and H `[B, C]`.
        type State = (NodeId, NodeId, FloatTensor<B>);

        fn backward(
            self,
            ops: Ops<Self::State, 3>,
            grads: &mut Gradients,
            checkpointer: &mut Checkpointer,
        ) {
            use burn::tensor::{Tensor, TensorPrimitive};
            let (parents, wanted) = parents_of(&ops);
            let grad = grads.consume::<B>(&ops.node); // [B, C], the upstream gradient of H
            let (x_id, weight_id, h) = ops.state;
            let x: FloatTensor<B> = checkpointer.retrieve_node_output(x_id); // [B, I]
            let weight: FloatTensor<B> = checkpointer.retrieve_node_output(weight_id); // [C, I]
            let h = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(h)); // [B, C]
            let one = Tensor::<B, 1>::ones([1], (&h.device(), h.dtype()));
            let (h, one) = (h.into_primitive().tensor(), one.into_primitive().tensor());
            let out = B::head_backward(x, weight, h, grad, one, wanted, self.0);
            register::<B>(grads, parents, out, |g| g);
        }
    }

    match LogitsBackward(kernels)
        .prepare::<C>([x.node.clone(), weight.node.clone(), bias.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let x_id = prep.checkpoint(&x);
            let weight_id = prep.checkpoint(&weight);
            let h = B::head_logits(x.primitive, weight.primitive, bias.primitive, kernels);
            prep.finish((x_id, weight_id, h.clone()), h)
        }
        OpsKind::UnTracked(prep) => {
            let h = B::head_logits(x.primitive, weight.primitive, bias.primitive, kernels);
            prep.finish(h)
        }
    }
}

/// The tracked loss, and with `predict` the predictions (never tracked: integers).
fn tracked<B: FusedHeadBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    bias: FloatTensor<Autodiff<B, C>>,
    labels: IntTensor<Autodiff<B, C>>,
    kernels: KernelOptions,
    predict: bool,
) -> (FloatTensor<Autodiff<B, C>>, Option<IntTensor<B>>) {
    /// The backward step, with the forward pass's kernel options.
    #[derive(Debug)]
    struct HeadBackward(KernelOptions);

    impl<B: FusedHeadBackend> Backward<B, 3> for HeadBackward {
        /// X (dW needs it) and W (dX needs it) as checkpointed parents, then Z (the ReLU
        /// mask, where the activation is ReLU) and dH (for a unit upstream gradient), both `[B, C]`, from the forward pass.
        type State = (NodeId, NodeId, FloatTensor<B>, FloatTensor<B>);

        fn backward(
            self,
            ops: Ops<Self::State, 3>,
            grads: &mut Gradients,
            checkpointer: &mut Checkpointer,
        ) {
            let (parents, wanted) = parents_of(&ops);
            // The upstream gradient of the loss, [1]: 1 for a plain `loss.backward()`, any
            // other value when the loss was scaled or added to other losses.
            let grad_loss = grads.consume::<B>(&ops.node);
            let (x_id, weight_id, z, dh) = ops.state;
            let x: FloatTensor<B> = checkpointer.retrieve_node_output(x_id); // [B, I]
            let weight: FloatTensor<B> = checkpointer.retrieve_node_output(weight_id); // [C, I]

            let out = B::head_backward(x, weight, z, dh, grad_loss, wanted, self.0);
            register::<B>(grads, parents, out, |g| g);
        }
    }

    let (x_shape, classes) = (x.primitive.shape(), weight.primitive.shape()[0]);
    // Half-precision inputs keep no rounded dH: f16's `(p - onehot) / B` falls below its range
    // at any large B, and bf16's rounded dH would be the backward's operand. Where B keeps Z
    // and dH in f32 for them (the CubeCL backends on CUDA at C <= 32, X read once per pass in
    // its own type), the step keeps them as for f32 inputs; elsewhere it computes the
    // gradients in the forward pass (in f32 on the CubeCL backends).
    let dtype = x.primitive.dtype();
    let half = matches!(dtype, DType::F16 | DType::BF16)
        && B::head_forward_state_dtype(dtype, classes) != DType::F32;
    if x_shape.num_dims() == 2
        && (half || B::head_gradients_in_forward(x_shape[0], x_shape[1], classes))
    {
        let terms = RowTerms::new(kernels.activation);
        let (loss, extras) =
            gradients_in_forward::<B, C>(x, weight, bias, labels, kernels, predict, terms);
        return (loss, extras.predictions);
    }

    // Compute bound: keep Z and dH from the forward pass rather than recompute the GEMM
    // under a checkpointing strategy. Labels are integers: not a parent, never differentiated.
    match HeadBackward(kernels)
        .prepare::<C>([x.node.clone(), weight.node.clone(), bias.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let x_id = prep.checkpoint(&x);
            let weight_id = prep.checkpoint(&weight);
            let dtype = labels.dtype();
            let fwd = B::head_forward(
                x.primitive,
                weight.primitive,
                bias.primitive,
                labels,
                kernels,
            );
            let predictions = predict.then(|| {
                predictions_of::<B>(fwd.z.clone(), RowTerms::new(kernels.activation), dtype)
            });
            let loss = prep.finish((x_id, weight_id, fwd.z, fwd.dh), fwd.loss);
            (loss, predictions)
        }
        OpsKind::UnTracked(prep) => {
            let inputs = [x.primitive, weight.primitive, bias.primitive];
            let (loss, predictions) = untracked::<B>(inputs, labels, kernels, predict);
            (prep.finish(loss), predictions)
        }
    }
}

/// The loss (and with `predict` the predictions) on B, nothing tracked.
fn untracked<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    labels: IntTensor<B>,
    kernels: KernelOptions,
    predict: bool,
) -> (FloatTensor<B>, Option<IntTensor<B>>) {
    let terms = RowTerms::new(kernels.activation);
    let (loss, outputs) =
        untracked_with_terms::<B>([x, weight, bias], labels, kernels, predict, terms);
    (loss, outputs.predictions)
}

/// [`untracked`] under `terms` (a logit scale, a softcap and a z-loss at most, and the
/// statistics): the loss, the predictions and the statistics where asked for.
fn untracked_with_terms<B: FusedHeadBackend>(
    [x, weight, bias]: [FloatTensor<B>; 3],
    labels: IntTensor<B>,
    kernels: KernelOptions,
    predict: bool,
    terms: RowTerms,
) -> (FloatTensor<B>, HeadExtraOutputs<B>) {
    let step = HeadStep::loss().with_predictions(predict).with_terms(terms);
    let out = B::head_step(x, weight, bias, labels, step, kernels);
    (out.loss, extra_outputs(out.predictions, out.token_stats))
}

/// The extras of a plain-route step.
fn extra_outputs<B: FusedHeadBackend>(
    predictions: Option<IntTensor<B>>,
    token_stats: Option<HeadTokenStats<B>>,
) -> HeadExtraOutputs<B> {
    HeadExtraOutputs {
        predictions,
        token_stats,
    }
}

/// The terms of `options` where they are the plain loss's but for a logit scale, a softcap
/// and a z-loss (the statistics asked for or not) and B streams the step (gradients in the
/// forward pass, X of rank 2): the plain route takes them, with no row weight
/// ([`HeadStep::terms`]). `None` elsewhere (the options' route).
fn streamed_unweighted<B: FusedHeadBackend, C: CheckpointStrategy>(
    x: &FloatTensor<Autodiff<B, C>>,
    weight: &FloatTensor<Autodiff<B, C>>,
    options: &HeadOptions,
    extras: HeadExtras,
) -> Option<RowTerms> {
    let shape = x.primitive.shape();
    let classes = weight.primitive.shape()[0];
    (options.is_plain_but_logit_terms()
        && shape.num_dims() == 2
        && streams::<B>(options, shape[0], shape[1], classes))
    .then(|| options.row_terms(extras.token_stats))
}

/// The tracked op where B computes the gradients in the forward pass: the backward step scales
/// them by the upstream gradient `g` `[1]` (the loss is a scalar, so `d(g loss) = g d(loss)`).
/// `terms`: the plain ones, or a logit scale, a softcap and a z-loss (no row weight needed),
/// and the statistics. Returns the loss and the extras asked for.
fn gradients_in_forward<B: FusedHeadBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    bias: FloatTensor<Autodiff<B, C>>,
    labels: IntTensor<Autodiff<B, C>>,
    kernels: KernelOptions,
    predict: bool,
    terms: RowTerms,
) -> (FloatTensor<Autodiff<B, C>>, HeadExtraOutputs<B>) {
    let wanted = wanted([&x, &weight, &bias].map(|t| !t.node.requirement.is_none()));
    // The gradients are the state: never recomputed (that would be the whole op again).
    match ScaleGradients
        .prepare::<C>([x.node.clone(), weight.node.clone(), bias.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (x, weight, bias) = (x.primitive, weight.primitive, bias.primitive);
            let step = HeadStep::loss()
                .with_wanted(wanted)
                .with_predictions(predict)
                .with_terms(terms);
            let out = B::head_step(x, weight, bias, labels, step, kernels);
            let extras = extra_outputs(out.predictions, out.token_stats);
            (prep.finish(out.gradients, out.loss), extras)
        }
        OpsKind::UnTracked(prep) => {
            let inputs = [x.primitive, weight.primitive, bias.primitive];
            let (loss, extras) = untracked_with_terms::<B>(inputs, labels, kernels, predict, terms);
            (prep.finish(loss), extras)
        }
    }
}

/// The backward step of a call whose gradients were computed in the forward pass, for a unit
/// upstream gradient: scale them by the upstream gradient `g` `[1]` and register them.
///
/// It reads g first (a wait for the work queued before it) and registers the gradients as
/// they are where g is 1. Scaling them always, with no read, was measured slower on the H200
/// at C <= 32 in bf16 (2026-12-04: 1.27 to 1.32 ms a step with one sync at
/// (65536, 1024, 10) against 0.72 to 0.77 with the read; the scaling ran
/// through fusion at about 0.7 ms of fixed cost, whatever the shape). bf16 and f16 at
/// C <= 32 on CUDA no longer take this step: their forward keeps Z and dH in f32 and the
/// backward kernel reads g on the GPU, as for f32 inputs.
#[derive(Debug)]
struct ScaleGradients;

impl<B: FusedHeadBackend> Backward<B, 3> for ScaleGradients {
    /// dX, dW and db for a unit upstream gradient, those of the tracked inputs.
    type State = HeadGradients<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (parents, _) = parents_of(&ops);
        let grad_loss = grads.consume::<B>(&ops.node); // [1]
        if is_one::<B>(&grad_loss) {
            // A plain `loss.backward()`: `grad * 1` is `grad`, bit for bit; the scaling
            // would read and write dW ([C, I]) once more.
            register::<B>(grads, parents, ops.state, |g| g);
        } else {
            register::<B>(grads, parents, ops.state, |g| {
                scale::<B>(g, grad_loss.clone())
            });
        }
    }
}

/// The tracked op under cross-entropy options that are not plain (B > 0), and with `predict`
/// the predictions (never tracked):
/// - on B's streamed path (C > 32 on the CubeCL backends, no smoothing), the mean and the sum
///   compute the gradients in the forward pass with each row's weight in the row kernel, and the
///   backward step scales them ([`ScaleGradients`]); the per-row reduction computes the losses
///   alone and its backward step runs the streamed pass again with `w[y] g[r]` as the row
///   weights ([`RowsAgain`]): its upstream gradient is a vector, unknown before the step;
/// - elsewhere, the materialized path keeps Z and each row's gradient G `[B, C]`, and the
///   backward step runs B's fused backward on `G u` ([`Materialized`]).
fn with_options<B: FusedHeadBackend, C: CheckpointStrategy>(
    [x, weight, bias]: [FloatTensor<Autodiff<B, C>>; 3],
    labels: IntTensor<Autodiff<B, C>>,
    options: &HeadOptions,
    extras: HeadExtras,
) -> (FloatTensor<Autodiff<B, C>>, HeadExtraOutputs<B>) {
    let (dtype, shape) = (x.primitive.dtype(), x.primitive.shape());
    let (batch, inputs, classes) = (shape[0], shape[1], weight.primitive.shape()[0]);
    let label_dtype = labels.dtype();
    let nodes = [x.node.clone(), weight.node.clone(), bias.node.clone()];
    let wanted = wanted([&x, &weight, &bias].map(|t| !t.node.requirement.is_none()));
    let kernels = options.kernels();
    let predict = extras.predictions;
    let rows = rows::<B>(labels, options, classes, sums_dtype(dtype));
    let denominator = denominator(&rows, options);
    let untracked = |x, weight, bias| {
        let inputs = [x, weight, bias];
        forward_with_rows::<B>(inputs, &rows, denominator.clone(), options, extras)
    };
    let finish = |t: burn::tensor::Tensor<B, 1>| t.cast(dtype).into_primitive().tensor();

    if !streams::<B>(options, batch, inputs, classes) {
        return match (Materialized {
            reduction: options.reduction,
            kernels,
        })
        .prepare::<C>(nodes)
        .compute_bound()
        .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let x_id = prep.checkpoint(&x);
                let weight_id = prep.checkpoint(&weight);
                let inputs = [x.primitive, weight.primitive, bias.primitive];
                let m = materialized::<B>(inputs, &rows, options, kernels, extras.token_stats);
                let terms = options.row_terms(false);
                let predictions =
                    predict.then(|| predictions_of::<B>(m.z.clone(), terms, label_dtype));
                let out = reduce(m.losses, denominator.clone(), options.reduction);
                let denominator = denominator.map(|d| d.into_primitive().tensor());
                let ignored = rows.ignored.clone().into_primitive();
                let state = (x_id, weight_id, m.z, m.gradients, denominator, ignored);
                let outputs = HeadExtraOutputs {
                    predictions,
                    token_stats: m.token_stats,
                };
                (prep.finish(state, finish(out)), outputs)
            }
            OpsKind::UnTracked(prep) => {
                let (out, outputs) = untracked(x.primitive, weight.primitive, bias.primitive);
                (prep.finish(out), outputs)
            }
        };
    }

    let terms = options.row_terms(extras.token_stats);
    let keep = rows.keep.clone();
    if options.reduction == HeadReduction::None {
        return match RowsAgain(kernels, terms)
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (x, weight, bias) = (x.primitive, weight.primitive, bias.primitive);
                let labels = rows.labels.clone().into_primitive();
                let row_weight = rows.weight.clone().into_primitive().tensor();
                let keep = keep.into_primitive().tensor();
                let step = HeadStep::loss()
                    .with_predictions(predict)
                    .with_row_weights(row_weight.clone())
                    .with_terms(terms)
                    .with_z_weights(keep.clone());
                let inputs = (x.clone(), weight.clone(), bias.clone(), labels.clone());
                let out = B::head_step(inputs.0, inputs.1, inputs.2, inputs.3, step, kernels);
                let (l, token_stats) = streamed_rows(out.loss, out.token_stats, &rows, terms);
                let state = (x, weight, bias, labels, [row_weight, keep]);
                let outputs = HeadExtraOutputs {
                    predictions: out.predictions,
                    token_stats,
                };
                (prep.finish(state, finish(l)), outputs)
            }
            OpsKind::UnTracked(prep) => {
                let (out, outputs) = untracked(x.primitive, weight.primitive, bias.primitive);
                (prep.finish(out), outputs)
            }
        };
    }

    match ScaleGradients
        .prepare::<C>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            // 0 on the ignored rows even where every row is (0 / 0 there): no gradient.
            let per_row = |w: burn::tensor::Tensor<B, 1>| match denominator.clone() {
                Some(d) => (w / d).mask_fill(rows.ignored.clone(), 0),
                None => w,
            }; // [B]
            let rho = per_row(rows.weight.clone());
            let mut step = HeadStep::loss()
                .with_wanted(wanted)
                .with_predictions(predict)
                .with_row_weights(rho.into_primitive().tensor())
                .with_terms(terms);
            if terms.z_loss != 0.0 {
                step = step.with_z_weights(per_row(keep).into_primitive().tensor());
            }
            let out = B::head_step(
                x.primitive,
                weight.primitive,
                bias.primitive,
                rows.labels.clone().into_primitive(),
                step,
                kernels,
            );
            let (l, token_stats) = streamed_rows(out.loss, out.token_stats, &rows, terms);
            let result = reduce(l, denominator, options.reduction);
            let outputs = HeadExtraOutputs {
                predictions: out.predictions,
                token_stats,
            };
            (prep.finish(out.gradients, finish(result)), outputs)
        }
        OpsKind::UnTracked(prep) => {
            let (out, outputs) = untracked(x.primitive, weight.primitive, bias.primitive);
            (prep.finish(out), outputs)
        }
    }
}

/// The materialized path's backward step: each row's upstream gradient `u` (`g / sum w`, `g`
/// or `g[r]`), `dH = G u`, then B's fused backward.
#[derive(Debug)]
struct Materialized {
    reduction: HeadReduction,
    kernels: KernelOptions,
}

impl<B: FusedHeadBackend> Backward<B, 3> for Materialized {
    /// X and W as checkpointed parents, Z and G `[B, C]`, the mean's denominator `[1]`, and
    /// which rows are ignored `[B]`.
    type State = (
        NodeId,
        NodeId,
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
        BoolTensor<B>,
    );

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        use burn::tensor::{Tensor, TensorPrimitive};
        let (parents, wanted) = parents_of(&ops);
        let grad = grads.consume::<B>(&ops.node); // [1], or [B] for `none`
        let (x_id, weight_id, z, g, denominator, ignored) = ops.state;
        let x: FloatTensor<B> = checkpointer.retrieve_node_output(x_id); // [B, I]
        let weight: FloatTensor<B> = checkpointer.retrieve_node_output(weight_id); // [C, I]
        let batch = z.shape()[0];
        let float = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
        // 0 on the ignored rows even where every row is (g / 0 there): no gradient.
        let ignored = Tensor::<B, 1, burn::tensor::Bool>::from_primitive(ignored);
        let u = row_upstream(float(grad), denominator.map(float), self.reduction, batch)
            .mask_fill(ignored, 0);
        let out = materialized_backward::<B>([x, weight, z], g, u, wanted, self.kernels);
        register::<B>(grads, parents, out, |g| g);
    }
}

/// The per-row reduction's backward step on the streamed path: the pass again, with
/// `w[y] g[r]` as each row's weight (and `keep[r] g[r]` as its z-weight), for the wanted
/// gradients.
#[derive(Debug)]
struct RowsAgain(KernelOptions, RowTerms);

impl<B: FusedHeadBackend> Backward<B, 3> for RowsAgain {
    /// X, W, b, the targets (ignored rows mapped to 0), `w[y]` and `keep` per row.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        IntTensor<B>,
        [FloatTensor<B>; 2],
    );

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        use burn::tensor::{Tensor, TensorPrimitive};
        let (parents, wanted) = parents_of(&ops);
        let grad = grads.consume::<B>(&ops.node); // [B]
        let (x, weight, bias, labels, [row_weight, keep]) = ops.state;
        let float = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
        let row_weight = float(row_weight);
        let grad = float(grad).cast(row_weight.dtype());
        let rho = grad.clone() * row_weight; // [B]
        let terms = RowTerms {
            token_stats: false,
            ..self.1
        };
        let mut step = HeadStep::loss()
            .with_wanted(wanted)
            .with_row_weights(rho.into_primitive().tensor())
            .with_terms(terms);
        if terms.z_loss != 0.0 {
            step = step.with_z_weights((grad * float(keep)).into_primitive().tensor()); // [B]
        }
        let out = B::head_step(x, weight, bias, labels, step, self.0);
        register::<B>(grads, parents, out.gradients, |g| g);
    }
}

/// The ids of a backward step's tracked parents (X, W and b, in that order; `None` where
/// untracked) and the gradients to produce for them.
fn parents_of<S>(ops: &Ops<S, 3>) -> ([Option<NodeId>; 3], HeadWanted) {
    let ids = ops.parents.each_ref().map(|p| p.as_ref().map(|n| n.id));
    (ids, wanted(ids.map(|id| id.is_some())))
}

/// The gradients to produce, from whether X, W and b (in that order) are tracked.
fn wanted([x, weight, bias]: [bool; 3]) -> HeadWanted {
    HeadWanted { x, weight, bias }
}

/// Registers each computed gradient of `out` (through `map`) for its parent, where that parent
/// is tracked.
fn register<B: FusedHeadBackend>(
    grads: &mut Gradients,
    parents: [Option<NodeId>; 3],
    out: HeadGradients<B>,
    map: impl Fn(FloatTensor<B>) -> FloatTensor<B>,
) {
    for (node, grad) in parents.into_iter().zip([out.x, out.weight, out.bias]) {
        if let (Some(node), Some(grad)) = (node, grad) {
            grads.register::<B>(node, map(grad));
        }
    }
}

/// Whether the upstream gradient `g` `[1]` is exactly 1: a read of 4 bytes, which waits for
/// the work queued before it (on the streamed path the host already waited for the products).
fn is_one<B: FusedHeadBackend>(g: &FloatTensor<B>) -> bool {
    use burn::tensor::{Tensor, TensorPrimitive};
    let g = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(g.clone()));
    g.into_data().iter::<f64>().eq([1.0])
}

/// `grad * g`, g `[1]` broadcast over `grad`.
fn scale<B: FusedHeadBackend>(grad: FloatTensor<B>, g: FloatTensor<B>) -> FloatTensor<B> {
    use burn::tensor::{Tensor, TensorPrimitive};
    let shape = grad.shape();
    if shape.num_elements() == 0 {
        return grad; // [0, I] (B = 0): broadcasting against g [1, 1] would make it [1, I]
    }
    let rank = shape.num_dims();
    let grad = TensorPrimitive::Float(grad);
    let g = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(g)); // [1]
    let out = match rank {
        1 => Tensor::<B, 1>::from_primitive(grad).mul(g).into_primitive(),
        _ => Tensor::<B, 2>::from_primitive(grad)
            .mul(g.unsqueeze_dim::<2>(0))
            .into_primitive(),
    };
    out.tensor()
}

/// B's float tensor as an untracked tensor of `Autodiff<B, C>` (a leaf that requires no
/// gradient).
fn untracked_float<B: FusedHeadBackend, C: CheckpointStrategy>(
    t: FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    FloatTensor::<Autodiff<B, C>>::new(t)
}
