//! `Fusion<B>`: each stage is registered as a custom operation on Burn's fusion stream and runs
//! B's kernels when the stream executes it. This is what makes the default
//! `burn::backend::Cuda` type (fusion on) use the kernels rather than a fallback.

use core::marker::PhantomData;

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::backend::{
    FusedHeadBackend, HeadActivation, HeadForward, HeadGradients, HeadLimits, HeadOptions,
    HeadPrecision, HeadWanted,
};

/// The seven primitive stages and the fused forward and backward, as fusion operations.
#[derive(Debug, Clone, Copy)]
enum Stage {
    Forward(HeadOptions),
    Backward(HeadWanted, HeadOptions),
    LossAndGradients(HeadWanted, HeadOptions),
    /// Inputs X, W, b, the labels and the row weights; outputs the per-row losses, then the
    /// wanted gradients.
    RowsLossAndGradients(HeadWanted, HeadOptions),
    /// Inputs Z, the labels, the rows' weights and keep flags, then (with `weighted`) the
    /// class weights; outputs the per-row losses and their gradients `[B, C]`.
    RowLosses {
        smoothing: f32,
        activation: HeadActivation,
        weighted: bool,
    },
    /// Outputs: the loss, the predictions (int), then the wanted gradients.
    LossGradientsPredictions(HeadWanted, HeadOptions),
    Logits(HeadOptions),
    LinearReluForward,
    SoftmaxCrossEntropy,
    ReluBackward,
    WeightGradient,
    BiasGradient,
    InputGradient,
    MeanLoss,
}

impl Stage {
    /// Which input holds the labels, for the stages that take them.
    fn labels_input(self) -> Option<usize> {
        match self {
            Stage::Forward(..)
            | Stage::LossAndGradients(..)
            | Stage::RowsLossAndGradients(..)
            | Stage::LossGradientsPredictions(..) => Some(3),
            Stage::RowLosses { .. } | Stage::SoftmaxCrossEntropy => Some(1),
            Stage::Backward(..)
            | Stage::Logits(_)
            | Stage::LinearReluForward
            | Stage::ReluBackward
            | Stage::WeightGradient
            | Stage::BiasGradient
            | Stage::InputGradient
            | Stage::MeanLoss => None,
        }
    }

    fn id(self) -> &'static str {
        match self {
            Stage::Forward(o) => variant(o, FORWARD),
            Stage::Backward(_, o) => variant(o, BACKWARD),
            Stage::LossAndGradients(_, o) => variant(o, LOSS_AND_GRADIENTS),
            Stage::RowsLossAndGradients(_, o) => variant(o, ROWS_LOSS_AND_GRADIENTS),
            Stage::RowLosses { activation, .. } => match activation {
                HeadActivation::Relu => "fused_head_row_losses",
                HeadActivation::Identity => "fused_head_row_losses_identity",
            },
            Stage::LossGradientsPredictions(_, o) => variant(o, LOSS_GRADIENTS_PREDICTIONS),
            Stage::Logits(o) => variant(o, LOGITS),
            Stage::LinearReluForward => "fused_head_linear_relu_forward",
            Stage::SoftmaxCrossEntropy => "fused_head_softmax_cross_entropy",
            Stage::ReluBackward => "fused_head_relu_backward",
            Stage::WeightGradient => "fused_head_weight_gradient",
            Stage::BiasGradient => "fused_head_bias_gradient",
            Stage::InputGradient => "fused_head_input_gradient",
            Stage::MeanLoss => "fused_head_mean_loss",
        }
    }
}

/// The ids of one fused stage for each option: [exact, TF32] x [ReLU, identity].
type Variants = [[&'static str; 2]; 2];

/// The [`Variants`] of the stage `fused_head_<stem>`: `_tf32` and `_identity` appended.
macro_rules! variants {
    ($stem:literal) => {
        [
            [
                concat!("fused_head_", $stem),
                concat!("fused_head_", $stem, "_identity"),
            ],
            [
                concat!("fused_head_", $stem, "_tf32"),
                concat!("fused_head_", $stem, "_tf32_identity"),
            ],
        ]
    };
}

const FORWARD: Variants = variants!("forward");
const BACKWARD: Variants = variants!("backward");
const LOSS_AND_GRADIENTS: Variants = variants!("loss_and_gradients");
const ROWS_LOSS_AND_GRADIENTS: Variants = variants!("rows_loss_and_gradients");
const LOSS_GRADIENTS_PREDICTIONS: Variants = variants!("loss_gradients_predictions");
const LOGITS: Variants = variants!("logits");

/// A fused stage's id for `options`: each choice of options is its own operation.
fn variant(options: HeadOptions, ids: Variants) -> &'static str {
    let precision = usize::from(options.precision == HeadPrecision::Tf32);
    let activation = usize::from(options.activation == HeadActivation::Identity);
    ids[precision][activation]
}

/// One registered stage: its IR (inputs, outputs) and which of B's methods runs it.
#[derive(Debug)]
struct StageOp<B> {
    desc: CustomOpIr,
    stage: Stage,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + FusedHeadBackend> Operation<B::FusionRuntime> for StageOp<B> {
    fn execute(
        &self,
        handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    ) {
        let inputs = &self.desc.inputs;
        let outputs = &self.desc.outputs;
        let mut labels = self
            .stage
            .labels_input()
            .map(|i| handles.get_int_tensor::<B>(&inputs[i]));
        let mut labels = || labels.take().expect("a stage with labels");
        let mut float = |i: usize| handles.get_float_tensor::<B>(&inputs[i]);
        if let Stage::LossGradientsPredictions(wanted, options) = self.stage {
            let (loss, grads, predictions) = B::head_loss_gradients_and_predictions(
                float(0),
                float(1),
                float(2),
                labels(),
                wanted,
                options,
            );
            handles.register_float_tensor::<B>(&outputs[0].id, loss);
            handles.register_int_tensor::<B>(&outputs[1].id, predictions);
            for (out, tensor) in outputs[2..].iter().zip(wanted_outputs(grads)) {
                handles.register_float_tensor::<B>(&out.id, tensor);
            }
            return;
        }
        let results: Vec<FloatTensor<B>> = match self.stage {
            Stage::Forward(options) => {
                let fwd = B::head_forward(float(0), float(1), float(2), labels(), options);
                vec![fwd.loss, fwd.z, fwd.dh]
            }
            Stage::Backward(wanted, options) => {
                let grads = B::head_backward(
                    float(0),
                    float(1),
                    float(2),
                    float(3),
                    float(4),
                    wanted,
                    options,
                );
                wanted_outputs(grads).collect()
            }
            Stage::LossAndGradients(wanted, options) => {
                let (loss, grads) = B::head_loss_and_gradients(
                    float(0),
                    float(1),
                    float(2),
                    labels(),
                    wanted,
                    options,
                );
                std::iter::once(loss).chain(wanted_outputs(grads)).collect()
            }
            Stage::RowsLossAndGradients(wanted, options) => {
                let (rows, grads) = B::head_rows_loss_and_gradients(
                    float(0),
                    float(1),
                    float(2),
                    labels(),
                    float(4),
                    wanted,
                    options,
                );
                std::iter::once(rows).chain(wanted_outputs(grads)).collect()
            }
            Stage::RowLosses {
                smoothing,
                activation,
                weighted,
            } => {
                let class_weights = weighted.then(|| float(4));
                let (l, g) = B::head_row_losses(
                    float(0),
                    labels(),
                    [float(2), float(3)],
                    class_weights,
                    smoothing,
                    activation,
                );
                vec![l, g]
            }
            Stage::Logits(options) => {
                vec![B::head_logits(float(0), float(1), float(2), options)]
            }
            Stage::LossGradientsPredictions(..) => unreachable!("run above: an int output"),
            Stage::LinearReluForward => {
                let (z, h) = B::head_linear_relu_forward(float(0), float(1), float(2));
                vec![z, h]
            }
            Stage::SoftmaxCrossEntropy => {
                let (loss, dh) = B::head_softmax_cross_entropy(float(0), labels());
                vec![loss, dh]
            }
            Stage::ReluBackward => vec![B::head_relu_backward(float(0), float(1), float(2))],
            Stage::WeightGradient => vec![B::head_weight_gradient(float(0), float(1))],
            Stage::BiasGradient => vec![B::head_bias_gradient(float(0))],
            Stage::InputGradient => vec![B::head_input_gradient(float(0), float(1))],
            Stage::MeanLoss => vec![B::head_mean_loss(float(0))],
        };
        for (out, tensor) in outputs.iter().zip(results) {
            handles.register_float_tensor::<B>(&out.id, tensor);
        }
    }
}

/// Registers `stage` with its inputs and float outputs of the given shapes (dtype of the first
/// input) and returns the (lazy) outputs.
fn register<B: FusionBackend + FusedHeadBackend>(
    stage: Stage,
    inputs: Vec<FusionTensor<B::FusionRuntime>>,
    output_shapes: &[Shape],
) -> Vec<FusionTensor<B::FusionRuntime>> {
    let dtype: DType = inputs[0].dtype;
    let outputs: Vec<(Shape, DType)> = output_shapes.iter().map(|s| (s.clone(), dtype)).collect();
    register_typed::<B>(stage, inputs, &outputs)
}

/// [`register`] with each output's dtype given.
fn register_typed<B: FusionBackend + FusedHeadBackend>(
    stage: Stage,
    inputs: Vec<FusionTensor<B::FusionRuntime>>,
    outputs: &[(Shape, DType)],
) -> Vec<FusionTensor<B::FusionRuntime>> {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let outputs: Vec<TensorIr> = outputs
        .iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape.clone(), *dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(stage.id(), &inputs, &outputs);
    client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        StageOp::<B> {
            desc,
            stage,
            _backend: PhantomData,
        },
    )
}

/// `[rows, cols]` of a rank-2 fusion tensor, checked.
fn dims2<R: FusionRuntime>(op: &str, name: &str, t: &FusionTensor<R>) -> [usize; 2] {
    crate::validate::rank2(op, name, &t.shape)
}

impl<B: FusionBackend + FusedHeadBackend> FusedHeadBackend for Fusion<B> {
    fn head_limits() -> HeadLimits {
        B::head_limits()
    }

    fn head_tf32_available(device: &Self::Device) -> bool {
        B::head_tf32_available(device)
    }

    fn head_gradients_in_forward(batch: usize, inputs: usize, classes: usize) -> bool {
        B::head_gradients_in_forward(batch, inputs, classes)
    }

    fn head_loss_and_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>) {
        let stage = Stage::LossAndGradients(wanted, options);
        let (loss, _, grads) = loss_stage::<B>(
            "head_loss_and_gradients",
            stage,
            [x, weight, bias],
            labels,
            None,
            wanted,
            false,
        );
        (loss, grads)
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
        let stage = Stage::LossGradientsPredictions(wanted, options);
        let (loss, predictions, grads) =
            loss_stage::<B>(op, stage, [x, weight, bias], labels, None, wanted, true);
        (loss, grads, predictions.expect("predictions asked for"))
    }

    fn head_rows_loss_and_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        rho: FloatTensor<Self>,
        wanted: HeadWanted,
        options: HeadOptions,
    ) -> (FloatTensor<Self>, HeadGradients<Self>) {
        let op = "head_rows_loss_and_gradients";
        let (batch, _, _) =
            crate::validate::linear_shapes(op, &x.shape, &weight.shape, &bias.shape);
        crate::validate::same_shape(op, "row weights", &rho.shape, "[B]", &[batch]);
        let sums = crate::loss::sums_dtype(x.dtype);
        assert!(
            rho.dtype == sums,
            "{op}: the row weights must be {sums:?}, got {:?}",
            rho.dtype
        );
        let stage = Stage::RowsLossAndGradients(wanted, options);
        let (rows, _, grads) = loss_stage::<B>(
            op,
            stage,
            [x, weight, bias],
            labels,
            Some(rho),
            wanted,
            false,
        );
        (rows, grads)
    }

    fn head_row_losses(
        z: FloatTensor<Self>,
        labels: IntTensor<Self>,
        [row_weight, keep]: [FloatTensor<Self>; 2],
        class_weights: Option<FloatTensor<Self>>,
        smoothing: f32,
        activation: HeadActivation,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [batch, classes] = dims2("head_row_losses", "Z [B, C]", &z);
        let outputs = [
            (Shape::new([batch]), crate::loss::sums_dtype(z.dtype)),
            (Shape::new([batch, classes]), z.dtype),
        ];
        let stage = Stage::RowLosses {
            smoothing,
            activation,
            weighted: class_weights.is_some(),
        };
        let mut inputs = vec![z, labels, row_weight, keep];
        inputs.extend(class_weights);
        let [l, g]: [_; 2] = register_typed::<B>(stage, inputs, &outputs)
            .try_into()
            .expect("two outputs");
        (l, g)
    }

    fn head_linear_relu_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (batch, _, classes) = crate::validate::linear_shapes(
            "linear_relu_forward",
            &x.shape,
            &weight.shape,
            &bias.shape,
        );
        let shape = Shape::new([batch, classes]);
        let [z, h]: [_; 2] = register::<B>(
            Stage::LinearReluForward,
            vec![x, weight, bias],
            &[shape.clone(), shape],
        )
        .try_into()
        .expect("two outputs");
        (z, h)
    }

    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: HeadOptions,
    ) -> FloatTensor<Self> {
        let (batch, _, classes) =
            crate::validate::linear_shapes("head_logits", &x.shape, &weight.shape, &bias.shape);
        let client = x.client.clone();
        let h = one(register::<B>(
            Stage::Logits(options),
            vec![x, weight, bias],
            &[Shape::new([batch, classes])],
        ));
        start_queued(&client);
        h
    }

    fn head_softmax_cross_entropy(
        h: FloatTensor<Self>,
        labels: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [batch, classes] = dims2("softmax_cross_entropy", "H [B, C]", &h);
        let shapes = [Shape::new([batch]), Shape::new([batch, classes])];
        let [loss, dh]: [_; 2] =
            register::<B>(Stage::SoftmaxCrossEntropy, vec![h, labels], &shapes)
                .try_into()
                .expect("two outputs");
        (loss, dh)
    }

    fn head_relu_backward(
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let shape = z.shape.clone();
        one(register::<B>(
            Stage::ReluBackward,
            vec![z, dh, grad_loss],
            &[shape],
        ))
    }

    fn head_weight_gradient(dz: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        let [_, classes] = dims2("weight_gradient", "dZ [B, C]", &dz);
        let [_, inputs] = dims2("weight_gradient", "X [B, I]", &x);
        one(register::<B>(
            Stage::WeightGradient,
            vec![dz, x],
            &[Shape::new([classes, inputs])],
        ))
    }

    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        let [_, classes] = dims2("bias_gradient", "dZ [B, C]", &dz);
        one(register::<B>(
            Stage::BiasGradient,
            vec![dz],
            &[Shape::new([classes])],
        ))
    }

    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let [batch, _] = dims2("input_gradient", "dZ [B, C]", &dz);
        let [_, inputs] = dims2("input_gradient", "W [C, I]", &weight);
        one(register::<B>(
            Stage::InputGradient,
            vec![dz, weight],
            &[Shape::new([batch, inputs])],
        ))
    }

    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        options: HeadOptions,
    ) -> HeadForward<Self> {
        let (batch, _, classes) =
            crate::validate::linear_shapes("head_forward", &x.shape, &weight.shape, &bias.shape);
        let shapes = [
            Shape::new([1]),
            Shape::new([batch, classes]),
            Shape::new([batch, classes]),
        ];
        let client = x.client.clone();
        let [loss, z, dh]: [_; 3] = register::<B>(
            Stage::Forward(options),
            vec![x, weight, bias, labels],
            &shapes,
        )
        .try_into()
        .expect("three outputs");
        start_queued(&client);
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
        let [batch, inputs] = dims2("head_backward", "X [B, I]", &x);
        let [classes, _] = dims2("head_backward", "W [C, I]", &weight);
        let shapes = wanted_shapes(wanted, batch, inputs, classes);
        let client = x.client.clone();
        let outputs = if shapes.is_empty() {
            Vec::new()
        } else {
            register::<B>(
                Stage::Backward(wanted, options),
                vec![x, weight, z, dh, grad_loss],
                &shapes,
            )
        }
        .into_iter();
        start_queued(&client);
        take_wanted(wanted, outputs)
    }

    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        one(register::<B>(
            Stage::MeanLoss,
            vec![loss_rows],
            &[Shape::new([1])],
        ))
    }
}

/// What [`loss_stage`] gives back: the loss, the predictions where asked for, the gradients.
type LossStage<B> = (
    FusionTensor<<B as FusionBackend>::FusionRuntime>,
    Option<FusionTensor<<B as FusionBackend>::FusionRuntime>>,
    HeadGradients<Fusion<B>>,
);

/// Registers a stage whose outputs are the loss (with row weights `rho`, an input after the
/// labels: the per-row losses `[B]` in the sums' dtype), with `predict` the predictions (in the
/// labels' dtype), then the wanted gradients, and takes them back apart; shapes checked as
/// `op`.
fn loss_stage<B: FusionBackend + FusedHeadBackend>(
    op: &str,
    stage: Stage,
    [x, weight, bias]: [FusionTensor<B::FusionRuntime>; 3],
    labels: FusionTensor<B::FusionRuntime>,
    rho: Option<FusionTensor<B::FusionRuntime>>,
    wanted: HeadWanted,
    predict: bool,
) -> LossStage<B> {
    let (batch, inputs, classes) =
        crate::validate::linear_shapes(op, &x.shape, &weight.shape, &bias.shape);
    let (float_dtype, label_dtype) = (x.dtype, labels.dtype);
    let mut outputs = vec![match rho {
        Some(_) => (Shape::new([batch]), crate::loss::sums_dtype(float_dtype)),
        None => (Shape::new([1]), float_dtype),
    }];
    if predict {
        outputs.push((Shape::new([batch]), label_dtype));
    }
    outputs.extend(
        wanted_shapes(wanted, batch, inputs, classes)
            .into_iter()
            .map(|shape| (shape, float_dtype)),
    );
    let client = x.client.clone();
    let mut tensors = vec![x, weight, bias, labels];
    tensors.extend(rho);
    let mut outputs = register_typed::<B>(stage, tensors, &outputs).into_iter();
    start_queued(&client);
    let loss = outputs.next().expect("the loss");
    let predictions = predict.then(|| outputs.next().expect("the predictions"));
    (loss, predictions, take_wanted(wanted, outputs))
}

/// Hands the operations queued so far on the fusion client to its server thread now, as
/// `cube::start_queued` does for the launches: the fusion server gets the fused op at once
/// rather than with the next batch of 32 or at the caller's sync (when its stream runs the op
/// is the stream's own decision). Does not wait.
fn start_queued<R: FusionRuntime>(client: &burn_fusion::client::GlobalFusionClient<R>) {
    client.flush_queue();
}

/// The shapes of the wanted gradients, in the order x, weight, bias: the outputs of a stage
/// that returns gradients.
fn wanted_shapes(wanted: HeadWanted, batch: usize, inputs: usize, classes: usize) -> Vec<Shape> {
    [
        (wanted.x, Shape::new([batch, inputs])),
        (wanted.weight, Shape::new([classes, inputs])),
        (wanted.bias, Shape::new([classes])),
    ]
    .into_iter()
    .filter_map(|(want, shape)| want.then_some(shape))
    .collect()
}

/// The computed gradients in [`wanted_shapes`]'s order.
fn wanted_outputs<B: Backend>(grads: HeadGradients<B>) -> impl Iterator<Item = FloatTensor<B>> {
    [grads.x, grads.weight, grads.bias].into_iter().flatten()
}

/// The wanted gradients back from a stage's outputs, in [`wanted_shapes`]'s order.
fn take_wanted<B: Backend>(
    wanted: HeadWanted,
    mut outputs: impl Iterator<Item = FloatTensor<B>>,
) -> HeadGradients<B> {
    let mut next = |want: bool| want.then(|| outputs.next().expect("a wanted output"));
    HeadGradients {
        x: next(wanted.x),
        weight: next(wanted.weight),
        bias: next(wanted.bias),
    }
}

/// The single output of a one-output stage.
fn one<T>(outputs: Vec<T>) -> T {
    outputs.into_iter().next().expect("one output")
}
