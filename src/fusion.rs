//! `Fusion<B>`: each method of the extension trait is registered as a custom operation on
//! Burn's fusion stream, which runs B's same method on the stream's handles when it executes
//! the operation. This is what makes the default `burn::backend::Cuda` type (fusion on) use
//! the kernels rather than a fallback.
//!
//! One generic operation ([`Call`]) serves every method: its inputs and outputs in the IR, and
//! the call of B's method as a closure. Each method below lists its inputs, the shapes of its
//! outputs and that call, once.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::backend::{
    FusedHeadBackend, HeadForward, HeadGradients, HeadLimits, HeadRowLosses, HeadStep,
    HeadStepOutput, HeadTokenStats, HeadWanted, KernelOptions, RowTerms,
};
use crate::options::{HeadActivation, HeadPrecision};

/// A tensor of B handed to or returned by a [`Call`]: the float and int primitives differ.
enum Prim<B: Backend> {
    Float(FloatTensor<B>),
    Int(IntTensor<B>),
}

impl<B: Backend> Prim<B> {
    fn float(self) -> FloatTensor<B> {
        match self {
            Prim::Float(t) => t,
            Prim::Int(_) => panic!("a float tensor was expected"),
        }
    }

    fn int(self) -> IntTensor<B> {
        match self {
            Prim::Int(t) => t,
            Prim::Float(_) => panic!("an int tensor was expected"),
        }
    }
}

/// What a [`Call`] runs: B's method on the inputs, in the IR's order, giving the outputs in
/// theirs.
type Run<B> = Box<dyn Fn(Vec<Prim<B>>) -> Vec<Prim<B>> + Send + Sync>;

/// One registered call of a method of B: its IR (inputs, outputs) and the call itself.
struct Call<B: Backend> {
    desc: CustomOpIr,
    run: Run<B>,
}

impl<B: Backend> core::fmt::Debug for Call<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Call").field("desc", &self.desc).finish()
    }
}

impl<B: FusionBackend> Operation<B::FusionRuntime> for Call<B> {
    fn execute(
        &self,
        handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    ) {
        let inputs = self
            .desc
            .inputs
            .iter()
            .map(|t| match t.dtype.is_float() {
                true => Prim::Float(handles.get_float_tensor::<B>(t)),
                false => Prim::Int(handles.get_int_tensor::<B>(t)),
            })
            .collect();
        for (out, tensor) in self.desc.outputs.iter().zip((self.run)(inputs)) {
            match tensor {
                Prim::Float(t) => handles.register_float_tensor::<B>(&out.id, t),
                Prim::Int(t) => handles.register_int_tensor::<B>(&out.id, t),
            }
        }
    }
}

/// Registers the call `run` of a method named `id` on `inputs`, with outputs of the given
/// shapes and dtypes, and returns them (lazy). Hands the operations queued so far to the
/// fusion server now where `start` (the fused methods: the server gets the op at once rather
/// than with the next batch of 32 or at the caller's sync; when its stream runs the op is the
/// stream's own decision). Does not wait.
fn call<B: FusionBackend>(
    id: &'static str,
    inputs: Vec<FusionTensor<B::FusionRuntime>>,
    outputs: &[(Shape, DType)],
    start: bool,
    run: impl Fn(Vec<Prim<B>>) -> Vec<Prim<B>> + Send + Sync + 'static,
) -> Vec<FusionTensor<B::FusionRuntime>> {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let outputs: Vec<TensorIr> = outputs
        .iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape.clone(), *dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(id, &inputs, &outputs);
    let run: Run<B> = Box::new(run);
    let outputs = client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        Call::<B> { desc, run },
    );
    if start {
        client.flush_queue();
    }
    outputs
}

/// `n` outputs of `dtype`, of the given shapes.
fn typed<const N: usize>(shapes: [Shape; N], dtype: DType) -> [(Shape, DType); N] {
    shapes.map(|s| (s, dtype))
}

/// The id of a fused method for `kernels`: each choice of precision and activation is its
/// own operation, `fused_head_<stem>` with `_tf32` and `_identity` appended.
fn id_of(stem: &'static str, kernels: KernelOptions) -> &'static str {
    macro_rules! ids {
        ($($stem:literal),*) => {
            match (stem, kernels.precision, kernels.activation) {
                $(
                    ($stem, HeadPrecision::Exact, HeadActivation::Relu) => concat!("fused_head_", $stem),
                    ($stem, HeadPrecision::Exact, HeadActivation::Identity) => concat!("fused_head_", $stem, "_identity"),
                    ($stem, HeadPrecision::Tf32, HeadActivation::Relu) => concat!("fused_head_", $stem, "_tf32"),
                    ($stem, HeadPrecision::Tf32, HeadActivation::Identity) => concat!("fused_head_", $stem, "_tf32_identity"),
                )*
                _ => unreachable!("a fused method's stem"),
            }
        };
    }
    ids!("forward", "backward", "step", "logits")
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

    fn head_forward_state_dtype(dtype: DType, classes: usize) -> DType {
        B::head_forward_state_dtype(dtype, classes)
    }

    fn head_products_in_f64() -> bool {
        B::head_products_in_f64()
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
        let outputs = typed([shape.clone(), shape], x.dtype);
        let [z, h]: [_; 2] = call::<B>(
            "fused_head_linear_relu_forward",
            vec![x, weight, bias],
            &outputs,
            false,
            |ins| {
                let [x, w, b] = floats(ins);
                let (z, h) = B::head_linear_relu_forward(x, w, b);
                vec![Prim::Float(z), Prim::Float(h)]
            },
        )
        .try_into()
        .expect("two outputs");
        (z, h)
    }

    fn head_softmax_cross_entropy(
        h: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [batch, classes] = dims2("softmax_cross_entropy", "H [B, C]", &h);
        let outputs = typed([Shape::new([batch]), Shape::new([batch, classes])], h.dtype);
        let [loss, dh]: [_; 2] = call::<B>(
            "fused_head_softmax_cross_entropy",
            vec![h, targets],
            &outputs,
            false,
            |ins| {
                let [h, targets] = ins.try_into().unwrap_or_else(|_| panic!("two inputs"));
                let (loss, dh) = B::head_softmax_cross_entropy(h.float(), targets.int());
                vec![Prim::Float(loss), Prim::Float(dh)]
            },
        )
        .try_into()
        .expect("two outputs");
        (loss, dh)
    }

    fn head_relu_backward(
        z: FloatTensor<Self>,
        dh: FloatTensor<Self>,
        grad_loss: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let outputs = [(z.shape.clone(), z.dtype)];
        let out = call::<B>(
            "fused_head_relu_backward",
            vec![z, dh, grad_loss],
            &outputs,
            false,
            |ins| {
                let [z, dh, g] = floats(ins);
                vec![Prim::Float(B::head_relu_backward(z, dh, g))]
            },
        );
        one(out)
    }

    fn head_weight_gradient(dz: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        let [_, classes] = dims2("weight_gradient", "dZ [B, C]", &dz);
        let [_, inputs] = dims2("weight_gradient", "X [B, I]", &x);
        let outputs = [(Shape::new([classes, inputs]), dz.dtype)];
        let out = call::<B>(
            "fused_head_weight_gradient",
            vec![dz, x],
            &outputs,
            false,
            |ins| {
                let [dz, x] = floats(ins);
                vec![Prim::Float(B::head_weight_gradient(dz, x))]
            },
        );
        one(out)
    }

    fn head_bias_gradient(dz: FloatTensor<Self>) -> FloatTensor<Self> {
        let [_, classes] = dims2("bias_gradient", "dZ [B, C]", &dz);
        let outputs = [(Shape::new([classes]), dz.dtype)];
        let out = call::<B>(
            "fused_head_bias_gradient",
            vec![dz],
            &outputs,
            false,
            |ins| {
                let [dz] = floats(ins);
                vec![Prim::Float(B::head_bias_gradient(dz))]
            },
        );
        one(out)
    }

    fn head_input_gradient(dz: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let [batch, _] = dims2("input_gradient", "dZ [B, C]", &dz);
        let [_, inputs] = dims2("input_gradient", "W [C, I]", &weight);
        let outputs = [(Shape::new([batch, inputs]), dz.dtype)];
        let out = call::<B>(
            "fused_head_input_gradient",
            vec![dz, weight],
            &outputs,
            false,
            |ins| {
                let [dz, w] = floats(ins);
                vec![Prim::Float(B::head_input_gradient(dz, w))]
            },
        );
        one(out)
    }

    fn head_sum(values: FloatTensor<Self>) -> FloatTensor<Self> {
        let outputs = [(Shape::new([1]), values.dtype)];
        let out = call::<B>("fused_head_sum", vec![values], &outputs, false, |ins| {
            let [values] = floats(ins);
            vec![Prim::Float(B::head_sum(values))]
        });
        one(out)
    }

    fn head_mean_loss(loss_rows: FloatTensor<Self>) -> FloatTensor<Self> {
        let outputs = [(Shape::new([1]), loss_rows.dtype)];
        let out = call::<B>(
            "fused_head_mean_loss",
            vec![loss_rows],
            &outputs,
            false,
            |ins| {
                let [rows] = floats(ins);
                vec![Prim::Float(B::head_mean_loss(rows))]
            },
        );
        one(out)
    }

    fn head_logits(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        kernels: KernelOptions,
    ) -> FloatTensor<Self> {
        let (batch, _, classes) =
            crate::validate::linear_shapes("head_logits", &x.shape, &weight.shape, &bias.shape);
        let outputs = [(Shape::new([batch, classes]), x.dtype)];
        let id = id_of("logits", kernels);
        let out = call::<B>(id, vec![x, weight, bias], &outputs, true, move |ins| {
            let [x, w, b] = floats(ins);
            vec![Prim::Float(B::head_logits(x, w, b, kernels))]
        });
        one(out)
    }

    fn head_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        targets: IntTensor<Self>,
        kernels: KernelOptions,
    ) -> HeadForward<Self> {
        let (batch, _, classes) =
            crate::validate::linear_shapes("head_forward", &x.shape, &weight.shape, &bias.shape);
        let bc = Shape::new([batch, classes]);
        let state = B::head_forward_state_dtype(x.dtype, classes);
        let outputs = vec![(Shape::new([1]), x.dtype), (bc.clone(), state), (bc, state)];
        let inputs = vec![x, weight, bias, targets];
        let id = id_of("forward", kernels);
        let [loss, z, dh]: [_; 3] = call::<B>(id, inputs, &outputs, true, move |ins| {
            let [x, w, b, targets] = ins.try_into().unwrap_or_else(|_| panic!("four inputs"));
            let (x, w, b) = (x.float(), w.float(), b.float());
            let fwd = B::head_forward(x, w, b, targets.int(), kernels);
            vec![fwd.loss, fwd.z, fwd.dh]
                .into_iter()
                .map(Prim::Float)
                .collect()
        })
        .try_into()
        .expect("three outputs");
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
        let [batch, inputs] = dims2("head_backward", "X [B, I]", &x);
        let [classes, _] = dims2("head_backward", "W [C, I]", &weight);
        let dtype = x.dtype;
        let shapes = wanted_shapes(wanted, batch, inputs, classes);
        if shapes.is_empty() {
            x.client.flush_queue();
            return HeadGradients::none();
        }
        let outputs: Vec<_> = shapes.into_iter().map(|s| (s, dtype)).collect();
        let inputs = vec![x, weight, z, dh, grad_loss];
        let id = id_of("backward", kernels);
        let outputs = call::<B>(id, inputs, &outputs, true, move |ins| {
            let [x, w, z, dh, g] = floats(ins);
            let grads = B::head_backward(x, w, z, dh, g, wanted, kernels);
            wanted_outputs(grads).map(Prim::Float).collect()
        });
        take_wanted(wanted, outputs.into_iter())
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
        let (batch, inputs, classes) =
            crate::validate::linear_shapes(op, &x.shape, &weight.shape, &bias.shape);
        let (float_dtype, label_dtype) = (x.dtype, targets.dtype);
        let HeadStep {
            wanted,
            predictions: predict,
            row_weights,
            terms,
            z_weights,
        } = step;
        let sums = crate::rows::sums_dtype(float_dtype);
        let z_weights = z_weights.filter(|_| terms.z_loss != 0.0);
        if let Some(z) = &z_weights {
            crate::validate::same_shape(op, "z-weights", &z.shape, "[B]", &[batch]);
        }
        // The loss: the mean [1], or with row weights the per-row losses [B] in the sums' dtype.
        let mut outputs = vec![match &row_weights {
            Some(rho) => {
                crate::validate::same_shape(op, "row weights", &rho.shape, "[B]", &[batch]);
                assert!(
                    rho.dtype == sums,
                    "{op}: the row weights must be {sums:?}, got {:?}",
                    rho.dtype
                );
                (Shape::new([batch]), sums)
            }
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
        // Each row's log-sum-exp, target log-probability and entropy (with row weights only).
        let weighted = row_weights.is_some();
        let stats = terms.token_stats || (weighted && terms.wants_stats());
        if stats {
            outputs.extend([(); 3].map(|_| (Shape::new([batch]), sums)));
        }
        let z_weighted = z_weights.is_some();
        let mut tensors = vec![x, weight, bias, targets];
        tensors.extend(row_weights);
        tensors.extend(z_weights);
        let id = id_of("step", kernels);
        let outputs = call::<B>(id, tensors, &outputs, true, move |ins| {
            let mut ins = ins.into_iter();
            let mut next = || ins.next().expect("an input");
            let (x, w, b, targets) = (next().float(), next().float(), next().float(), next());
            let mut step = HeadStep::loss()
                .with_wanted(wanted)
                .with_predictions(predict);
            if weighted {
                step = step.with_row_weights(next().float());
            }
            step = step.with_terms(terms);
            if z_weighted {
                step = step.with_z_weights(next().float());
            }
            let out = B::head_step(x, w, b, targets.int(), step, kernels);
            let mut outputs = vec![Prim::Float(out.loss)];
            outputs.extend(out.predictions.map(Prim::Int));
            outputs.extend(wanted_outputs(out.gradients).map(Prim::Float));
            if let Some(s) = out.token_stats {
                outputs.extend([s.log_sum_exp, s.target_log_prob, s.entropy].map(Prim::Float));
            }
            outputs
        });
        let mut outputs = outputs.into_iter();
        let loss = outputs.next().expect("the loss");
        let predictions = predict.then(|| outputs.next().expect("the predictions"));
        let gradients = take_wanted(wanted, outputs.by_ref());
        let token_stats = stats.then(|| {
            let mut next = || outputs.next().expect("a statistic");
            HeadTokenStats {
                log_sum_exp: next(),
                target_log_prob: next(),
                entropy: next(),
            }
        });
        HeadStepOutput {
            loss,
            gradients,
            predictions,
            token_stats,
        }
    }

    fn head_row_losses(
        z: FloatTensor<Self>,
        targets: IntTensor<Self>,
        [row_weight, keep]: [FloatTensor<Self>; 2],
        class_weights: Option<FloatTensor<Self>>,
        terms: RowTerms,
    ) -> HeadRowLosses<Self> {
        let [batch, classes] = dims2("head_row_losses", "Z [B, C]", &z);
        let sums = crate::rows::sums_dtype(z.dtype);
        let mut outputs = vec![
            (Shape::new([batch]), sums),
            (Shape::new([batch, classes]), z.dtype),
        ];
        if terms.token_stats {
            outputs.extend([(); 3].map(|_| (Shape::new([batch]), sums)));
        }
        let id = match terms.activation {
            HeadActivation::Relu => "fused_head_row_losses",
            HeadActivation::Identity => "fused_head_row_losses_identity",
        };
        let weighted = class_weights.is_some();
        let mut inputs = vec![z, targets, row_weight, keep];
        inputs.extend(class_weights);
        let outputs = call::<B>(id, inputs, &outputs, false, move |ins| {
            let mut ins = ins.into_iter();
            let mut next = || ins.next().expect("an input");
            let (z, targets, row_weight, keep) = (next().float(), next().int(), next(), next());
            let class_weights = weighted.then(|| next().float());
            let out = B::head_row_losses(
                z,
                targets,
                [row_weight.float(), keep.float()],
                class_weights,
                terms,
            );
            let mut outs = vec![Prim::Float(out.losses), Prim::Float(out.gradients)];
            if let Some(s) = out.token_stats {
                outs.extend([s.log_sum_exp, s.target_log_prob, s.entropy].map(Prim::Float));
            }
            outs
        });
        let mut outputs = outputs.into_iter();
        let mut next = || outputs.next().expect("an output");
        let (losses, gradients) = (next(), next());
        let token_stats = terms.token_stats.then(|| HeadTokenStats {
            log_sum_exp: next(),
            target_log_prob: next(),
            entropy: next(),
        });
        HeadRowLosses {
            losses,
            gradients,
            token_stats,
        }
    }
}

/// The float inputs of a call, `N` of them.
fn floats<B: Backend, const N: usize>(inputs: Vec<Prim<B>>) -> [FloatTensor<B>; N] {
    let floats: Vec<_> = inputs.into_iter().map(Prim::float).collect();
    floats
        .try_into()
        .unwrap_or_else(|_| panic!("a call with {N} float inputs"))
}

/// The shapes of the wanted gradients, in the order x, weight, bias: the outputs of a call
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

/// The wanted gradients back from a call's outputs, in [`wanted_shapes`]'s order.
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

/// The single output of a one-output call.
fn one<T>(outputs: Vec<T>) -> T {
    outputs.into_iter().next().expect("one output")
}
