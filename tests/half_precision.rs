//! bf16 and f16 tensors on CUDA: the training step through autodiff against Burn's stock
//! autodiff on NdArray in f64 on the same (rounded) inputs, under the bound
//! `gates::half_slack` derives from each format; the same bits on every call; the predicted
//! classes. Both activations; C <= 32 (the small-C kernels reading X in its own type) and
//! C > 32 (the
//! native streamed path on cuBLASLt), with chunks of a few rows, an odd I (operands at 2-byte
//! offsets), a prime B and an upstream gradient; and rows ignored under `HeadOptions`.
//!
//! Every tensor here is made with an explicit dtype: Burn fixes a device type's default float
//! dtype once per process.
#![cfg(feature = "cuda")]

mod common;

use burn::backend::Autodiff;
use burn::backend::cuda::CudaDevice;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, bf16, f16};
use burn_fused_head::{
    FusedHeadBackend, HeadAccumulation, HeadActivation, HeadLogits, HeadOptions,
    fused_linear_cross_entropy, fused_linear_cross_entropy_and_predictions,
};
use burn_fused_head_testing::gates::{
    Slack, gate_with_slack, half_slack, lean_slack, rounded_logits_slack,
};
use burn_fused_head_testing::reference::HeadData;
use common::*;

type FusionBf16 = Autodiff<burn::backend::Cuda<bf16>>;
type RawBf16 = Autodiff<burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, bf16, i32, u8>>;
type FusionF16 = Autodiff<burn::backend::Cuda<f16>>;
type RawF16 = Autodiff<burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f16, i32, u8>>;
/// f16 tensors on the f32 default backend (the dtype of the tensors decides).
type FusionF32 = Autodiff<burn::backend::Cuda>;

/// One test of this file at a time: the ignored-rows tests read the process-wide count of
/// streamed steps, which another test's steps would move.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds [`SERIAL`] (a failed test's poisoning does not stop the others).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// (B, I, C, chunk elements): C <= 32 (no streamed path: the plane layout of the forward, and
/// at B = 16411 its row layout; vectors of 4 elements of X, and of 1 at I = 37); one chunk at C = 33; chunks of 13
/// rows over a prime B at C = 1000 and 1002; an odd I (each chunk's X rows start at a 2-byte
/// offset) in chunks of 3 rows; the crate's own rule at C = 4099; C = 65540 (cubes of 1024
/// units) in one chunk. The row kernel reads 4 classes at a time at C = 1000, 260 and 65540,
/// 2 at C = 1002 and 130, 1 at 33, 257 and 4099. In bf16, `B <= 2 I` (C = 33, 257, 260, 130,
/// 4099, 65540) keeps dZ for the whole batch, in several chunks at C = 257, 260 and 130.
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (67, 24, 10, 0),
    (67, 40, 33, 0),
    (131, 64, 1000, 1000 * 13),
    (131, 64, 1002, 1002 * 13),
    (61, 37, 257, 257 * 3),
    (61, 37, 260, 260 * 3),
    (61, 40, 130, 130 * 7),
    (256, 128, 4099, 0),
    (3, 8, 65540, 0),
    (16411, 20, 7, 0),
    (67, 37, 32, 0),
];

/// Loss and gradients of `scale * head` in `dtype` on `B` against the f64 reference on the same
/// rounded inputs, under the half bound.
fn check<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    dtype: DType,
    (batch, inputs, classes, elements): (usize, usize, usize, usize),
    activation: HeadActivation,
    scale: f64,
) {
    let data = HeadData::random(11 + classes as u64, batch, inputs, classes).rounded_to(dtype);
    let slack = half_slack(&data, scale, dtype, activation);
    let context = format!("{dtype:?} {activation:?} B={batch} I={inputs} C={classes} g={scale}");
    gate_step::<B>(
        device,
        dtype,
        &data,
        &chunks(activation, elements),
        scale,
        &slack,
        &context,
    );
}

/// Loss and gradients of `scale * head` with `options` in `dtype` on `B` against the f64
/// reference of `options`' activation on the same rounded inputs, under `slack`.
fn gate_step<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    dtype: DType,
    data: &HeadData,
    options: &HeadOptions,
    scale: f64,
    slack: &Slack,
    context: &str,
) {
    let (x, w, b, labels) = data.tensors::<B>(device, dtype);
    let got = head_grads(x, w, b, labels, scale, |x, w, b, l| {
        fused_linear_cross_entropy(x, w, Some(b), l, options)
    });
    let want = match options.activation {
        HeadActivation::Relu => stock_grads(data, scale),
        HeadActivation::Identity => stock_linear_grads(data, scale),
    };
    assert_gates(
        context,
        &[
            gate_with_slack("loss", &[got.loss], &[want.loss], &[slack.loss]),
            gate_with_slack("dX", &got.dx, &want.dx, &slack.dx),
            gate_with_slack("dW", &got.dw, &want.dw, &slack.dw),
            gate_with_slack("db", &got.db, &want.db, &slack.db),
        ],
    );
}

#[test]
fn bf16_training_step_is_within_the_bf16_bound_of_the_f64_reference() {
    let _serial = serial();
    let device = CudaDevice::default();
    for &shape in SHAPES {
        let whole = burn_fused_head::testing::whole_batch_dz_steps();
        let native = burn_fused_head::testing::half_small_class_steps();
        for activation in [HeadActivation::Relu, HeadActivation::Identity] {
            check::<FusionBf16>(&device, DType::BF16, shape, activation, 1.0);
        }
        check::<RawBf16>(&device, DType::BF16, shape, HeadActivation::Relu, 0.5);
        // The tests of this file run one at a time (`serial`): the counts are these calls'.
        let (batch, inputs, classes, _) = shape;
        let small = burn_fused_head::testing::half_small_class_steps() - native;
        let expected = if classes <= 32 { 3 } else { 0 };
        assert_eq!(
            small, expected,
            "{shape:?}: steps that read bf16 X natively at C <= 32"
        );
        let kept = burn_fused_head::testing::whole_batch_dz_steps() - whole;
        let expected = if classes > 32 && batch <= 2 * inputs {
            3
        } else {
            0
        };
        assert_eq!(
            kept, expected,
            "{shape:?}: steps that kept the whole batch's dZ"
        );
    }
}

/// The lean mode (`HeadAccumulation::Lean`, dW summed in bf16 between chunks) at every
/// shape of C > 32: within the lean bound (`gates::lean_slack`, the half bound plus one
/// rounding of the running dW per chunk) of the f64 reference, never in the whole-batch mode,
/// and, with more than one chunk, not the bits of the f32 accumulation (its roundings ran).
#[test]
fn bf16_lean_training_step_is_within_the_lean_bound_of_the_f64_reference() {
    let _serial = serial();
    let device = CudaDevice::default();
    for &(batch, inputs, classes, elements) in SHAPES.iter().filter(|s| s.2 > 32) {
        let whole = burn_fused_head::testing::whole_batch_dz_steps();
        let data =
            HeadData::random(23 + classes as u64, batch, inputs, classes).rounded_to(DType::BF16);
        let chunk = (elements > 0).then_some(elements);
        let rows =
            burn_fused_head::testing::lean_chunk_rows(batch, classes, chunk, HeadLogits::F32);
        let lean =
            |activation| chunks(activation, elements).with_accumulation(HeadAccumulation::Lean);
        for (activation, scale, raw) in [
            (HeadActivation::Relu, 1.0, false),
            (HeadActivation::Identity, 1.0, false),
            (HeadActivation::Relu, 0.5, true),
        ] {
            let options = lean(activation);
            let slack = lean_slack(&data, scale, DType::BF16, activation, rows);
            let context = format!(
                "lean {activation:?} B={batch} I={inputs} C={classes} rows={rows} g={scale}"
            );
            let bf16 = DType::BF16;
            if raw {
                gate_step::<RawBf16>(&device, bf16, &data, &options, scale, &slack, &context);
            } else {
                gate_step::<FusionBf16>(&device, bf16, &data, &options, scale, &slack, &context);
            }
        }
        // The tests of this file run one at a time (`serial`): the count is these calls'.
        assert_eq!(
            burn_fused_head::testing::whole_batch_dz_steps(),
            whole,
            "B={batch} I={inputs} C={classes}: a lean step kept the whole batch's dZ"
        );
        if rows < batch {
            let dw = |options: &HeadOptions| {
                let (x, w, b, labels) = data.tensors::<FusionBf16>(&device, DType::BF16);
                head_grads(x, w, b, labels, 1.0, |x, w, b, l| {
                    fused_linear_cross_entropy(x, w, Some(b), l, options)
                })
                .dw
            };
            let relu = HeadActivation::Relu;
            let f32_sums = dw(&chunks(relu, elements).with_accumulation(HeadAccumulation::F32));
            assert!(
                dw(&lean(relu)) != f32_sums,
                "B={batch} I={inputs} C={classes}: lean dW over {rows}-row chunks has the bits of \
                 the f32 accumulation"
            );
        }
    }
}

/// Rounded logits (`HeadLogits::Rounded`: P rounded to bf16, dZ written over it, db from
/// it) at every shape of C > 32, with the f32 accumulation (P at the whole-batch dZ's rows
/// where `B <= 2 I`) and in the lean mode: within `gates::rounded_logits_slack` (the half or
/// lean bound plus each logit's rounding) of the f64 reference, and not the bits of the f32
/// logits (the rounding ran).
#[test]
fn bf16_rounded_logits_training_step_is_within_the_rounded_bound_of_the_f64_reference() {
    let _serial = serial();
    let device = CudaDevice::default();
    for &(batch, inputs, classes, elements) in SHAPES.iter().filter(|s| s.2 > 32) {
        let data =
            HeadData::random(29 + classes as u64, batch, inputs, classes).rounded_to(DType::BF16);
        let chunk = (elements > 0).then_some(elements);
        for accumulation in [HeadAccumulation::F32, HeadAccumulation::Lean] {
            let whole = burn_fused_head::testing::whole_batch_dz_steps();
            let lean = (accumulation == HeadAccumulation::Lean).then(|| {
                burn_fused_head::testing::lean_chunk_rows(
                    batch,
                    classes,
                    chunk,
                    HeadLogits::Rounded,
                )
            });
            let options = |activation, logits| {
                chunks(activation, elements)
                    .with_accumulation(accumulation)
                    .with_logits(logits)
            };
            for (activation, scale, raw) in [
                (HeadActivation::Relu, 1.0, false),
                (HeadActivation::Identity, 1.0, false),
                (HeadActivation::Relu, 0.5, true),
            ] {
                let rounded = options(activation, HeadLogits::Rounded);
                let slack = rounded_logits_slack(&data, scale, activation, lean);
                let context = format!(
                    "rounded logits, {accumulation:?} {activation:?} B={batch} I={inputs} \
                     C={classes} lean rows={lean:?} g={scale}"
                );
                let bf16 = DType::BF16;
                if raw {
                    gate_step::<RawBf16>(&device, bf16, &data, &rounded, scale, &slack, &context);
                } else {
                    gate_step::<FusionBf16>(
                        &device, bf16, &data, &rounded, scale, &slack, &context,
                    );
                }
            }
            // The tests of this file run one at a time (`serial`): the count is these calls'.
            let kept = burn_fused_head::testing::whole_batch_dz_steps() - whole;
            let expected = if lean.is_none() && batch <= 2 * inputs {
                3
            } else {
                0
            };
            assert_eq!(
                kept, expected,
                "B={batch} I={inputs} C={classes} {accumulation:?}: rounded-logits steps that \
                 kept the whole batch's dZ"
            );
            let relu = HeadActivation::Relu;
            assert!(
                bits(&data, &options(relu, HeadLogits::Rounded))
                    != bits(&data, &options(relu, HeadLogits::F32)),
                "B={batch} I={inputs} C={classes} {accumulation:?}: rounded logits give the \
                 bits of the f32 logits"
            );
        }
    }
}

/// f16 runs the f32 kernels (at C <= 32 on X as it is) and never rounds dZ to f16 (it would
/// leave f16's range at large B): within the f16 bound at every C, on f16 backends and on f32 ones
/// given f16 tensors. B = 4096 at C = 1000: a dZ of `p / B` far below f16's smallest subnormal
/// for most classes, which a rounded dZ would zero.
#[test]
fn f16_training_step_is_within_the_f16_bound_of_the_f64_reference() {
    let _serial = serial();
    let device = CudaDevice::default();
    for &shape in SHAPES.iter().chain(&[(4096, 32, 1000, 0)]) {
        let native = burn_fused_head::testing::half_small_class_steps();
        for activation in [HeadActivation::Relu, HeadActivation::Identity] {
            check::<FusionF16>(&device, DType::F16, shape, activation, 1.0);
        }
        check::<RawF16>(&device, DType::F16, shape, HeadActivation::Relu, 0.5);
        check::<FusionF32>(&device, DType::F16, shape, HeadActivation::Identity, 1.0);
        let small = burn_fused_head::testing::half_small_class_steps() - native;
        let expected = if shape.2 <= 32 { 4 } else { 0 };
        assert_eq!(
            small, expected,
            "{shape:?}: steps that read f16 X natively at C <= 32"
        );
    }
}

/// The predictions of untracked calls in `dtype` on `B` (seed `seed`) against the argmax of
/// the f64 reference's H on the same rounded inputs, at every shape.
fn predictions_are_the_rows_argmax<B: FusedHeadBackend<Device = CudaDevice>>(
    dtype: DType,
    seed: u64,
) {
    let device = CudaDevice::default();
    for &(batch, inputs, classes, elements) in SHAPES {
        let data = HeadData::random(seed, batch, inputs, classes).rounded_to(dtype);
        let options = chunks(HeadActivation::Relu, elements);
        let (x, w, b, labels) = data.tensors::<B>(&device, dtype);
        let (_loss, predictions) =
            fused_linear_cross_entropy_and_predictions(x, w, Some(b), labels, &options);
        let predictions = to_i64(predictions);
        let h = reference_stages(&data, 1.0).h;
        assert_predictions(
            &format!("{dtype:?} B={batch} C={classes}"),
            &predictions,
            &h,
            classes,
        );
    }
}

#[test]
fn f16_predictions_are_the_rows_argmax() {
    let _serial = serial();
    predictions_are_the_rows_argmax::<FusionF16>(DType::F16, 4);
}

/// The loss and gradients of one bf16 call with `options`, as bits.
fn bits(data: &HeadData, options: &HeadOptions) -> Vec<u64> {
    let device = CudaDevice::default();
    let (x, w, b, labels) = data.tensors::<FusionBf16>(&device, DType::BF16);
    let got = head_grads(x, w, b, labels, 1.0, |x, w, b, l| {
        fused_linear_cross_entropy(x, w, Some(b), l, options)
    });
    [vec![got.loss], got.dx, got.dw, got.db]
        .concat()
        .into_iter()
        .map(f64::to_bits)
        .collect()
}

#[test]
fn bf16_gives_the_same_bits_on_every_call() {
    let _serial = serial();
    for &(batch, inputs, classes, elements) in &SHAPES[1..] {
        let data = HeadData::random(5, batch, inputs, classes).rounded_to(DType::BF16);
        for accumulation in [HeadAccumulation::F32, HeadAccumulation::Lean] {
            for logits in [HeadLogits::F32, HeadLogits::Rounded] {
                let options = chunks(HeadActivation::Relu, elements)
                    .with_accumulation(accumulation)
                    .with_logits(logits);
                let first = bits(&data, &options);
                for _ in 0..2 {
                    assert!(
                        bits(&data, &options) == first,
                        "B={batch} I={inputs} C={classes} {accumulation:?} {logits:?}: bits \
                         differ between calls"
                    );
                }
            }
        }
    }
}

#[test]
fn bf16_predictions_are_the_rows_argmax() {
    let _serial = serial();
    predictions_are_the_rows_argmax::<FusionBf16>(DType::BF16, 3);
}

/// Rows ignored under `HeadOptions` in bf16 (every fifth): the loss and the gradients are those of
/// the rows kept, under the bf16 bound of the rows kept against the f64 reference on them (an
/// ignored row's dZ is exactly 0, so it adds nothing to dW and db); the ignored rows' dX is 0.
/// C <= 32 runs the materialized path in f32, C > 32 the native streamed path with its row
/// weights (on one GPU timeline).
#[test]
fn bf16_ignored_rows_give_the_step_of_the_rows_kept() {
    let _serial = serial();
    ignored_rows_give_the_step_of_the_rows_kept::<FusionBf16>(DType::BF16);
}

/// The same in f16, under the f16 bound, on `Cuda<f16>` and as f16 tensors on `Cuda`: C > 32
/// runs the f32 impl's streamed path on the inputs cast up (on one GPU timeline), with its row
/// weights.
#[test]
fn f16_ignored_rows_give_the_step_of_the_rows_kept() {
    let _serial = serial();
    ignored_rows_give_the_step_of_the_rows_kept::<FusionF16>(DType::F16);
    ignored_rows_give_the_step_of_the_rows_kept::<FusionF32>(DType::F16);
}

/// [`bf16_ignored_rows_give_the_step_of_the_rows_kept`] on `B` in `dtype`.
fn ignored_rows_give_the_step_of_the_rows_kept<
    B: AutodiffBackend + FusedHeadBackend<Device = CudaDevice>,
>(
    dtype: DType,
) {
    let device = CudaDevice::default();
    for &(batch, inputs, classes, elements) in SHAPES {
        let full = HeadData::random(17 + classes as u64, batch, inputs, classes).rounded_to(dtype);
        let ignored = |r: usize| r % 5 == 2;
        let mut data = full.clone();
        let mut kept = full.clone();
        kept.x.clear();
        kept.labels.clear();
        for r in 0..batch {
            if ignored(r) {
                data.labels[r] = -100;
            } else {
                kept.x
                    .extend_from_slice(&full.x[r * inputs..(r + 1) * inputs]);
                kept.labels.push(full.labels[r]);
            }
        }
        kept.batch = kept.labels.len();
        let options = chunks(HeadActivation::Relu, elements).with_ignore_index(Some(-100));
        let (x, w, b, labels) = data.tensors::<B>(&device, dtype);
        let before = burn_fused_head::testing::one_timeline_steps();
        let got = head_grads(x, w, b, labels, 1.0, |x, w, b, l| {
            fused_linear_cross_entropy(x, w, Some(b), l, &options)
        });
        let context = format!("{dtype:?} ignored rows, B={batch} I={inputs} C={classes}");
        if classes > 32 {
            // The tests of this file run one at a time (`serial`).
            assert!(
                burn_fused_head::testing::one_timeline_steps() > before,
                "{context}: the step ran on the streamed path, on one GPU timeline"
            );
        }
        let want = stock_grads(&kept, 1.0);
        let slack = half_slack(&kept, 1.0, dtype, HeadActivation::Relu);
        let mut dx_kept = Vec::new();
        for r in 0..batch {
            let row = &got.dx[r * inputs..(r + 1) * inputs];
            if ignored(r) {
                assert!(row.iter().all(|&v| v == 0.0), "{context}: dX of row {r}");
            } else {
                dx_kept.extend_from_slice(row);
            }
        }
        assert_gates(
            &context,
            &[
                gate_with_slack("loss", &[got.loss], &[want.loss], &[slack.loss]),
                gate_with_slack("dX", &dx_kept, &want.dx, &slack.dx),
                gate_with_slack("dW", &got.dw, &want.dw, &slack.dw),
                gate_with_slack("db", &got.db, &want.db, &slack.db),
            ],
        );
    }
}

/// `head_forward` on bf16 and f16 X keeps Z and dH in the dtype
/// `head_forward_state_dtype` names: f32 at C <= 32 (the small-C kernels read X natively, Z
/// and dH never rounded), X's dtype at C > 32; the loss and the gradients of `head_backward`
/// from them are in X's dtype. Raw and fused, every gradient wanted and dX alone.
#[test]
fn half_forward_keeps_z_and_dh_in_the_dtype_it_names() {
    let _serial = serial();
    state_dtypes::<burn::backend::Cuda<bf16>>(DType::BF16);
    state_dtypes::<burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, bf16, i32, u8>>(DType::BF16);
    state_dtypes::<burn::backend::Cuda<f16>>(DType::F16);
    state_dtypes::<burn::backend::Cuda>(DType::F16);
}

/// [`half_forward_keeps_z_and_dh_in_the_dtype_it_names`] on `B` in `dtype`.
fn state_dtypes<B: FusedHeadBackend<Device = CudaDevice>>(dtype: DType) {
    use burn::tensor::{Tensor, TensorMetadata};
    use burn_fused_head::HeadOptions;
    use burn_fused_head::backend::HeadWanted;
    let device = CudaDevice::default();
    for (batch, inputs, classes) in [(67, 24, 10), (16411, 20, 7), (67, 40, 33)] {
        let state = B::head_forward_state_dtype(dtype, classes);
        let expected = if classes <= 32 { DType::F32 } else { dtype };
        assert_eq!(state, expected, "{dtype:?} C={classes}: the state's dtype");
        let data = HeadData::random(17, batch, inputs, classes).rounded_to(dtype);
        let (x, w, b, labels) = data.tensors::<B>(&device, dtype);
        let kernels = HeadOptions::default().kernels();
        let (xp, wp) = (x.into_primitive().tensor(), w.into_primitive().tensor());
        let fwd = B::head_forward(
            xp.clone(),
            wp.clone(),
            b.into_primitive().tensor(),
            labels.into_primitive(),
            kernels,
        );
        let context = format!("{dtype:?} B={batch} C={classes}");
        assert_eq!(fwd.loss.dtype(), dtype, "{context}: the loss's dtype");
        assert_eq!(fwd.z.dtype(), state, "{context}: Z's dtype");
        assert_eq!(fwd.dh.dtype(), state, "{context}: dH's dtype");
        let g = Tensor::<B, 1>::full([1], 0.5, (&device, dtype))
            .into_primitive()
            .tensor();
        let x_only = HeadWanted {
            x: true,
            weight: false,
            bias: false,
        };
        for wanted in [HeadWanted::ALL, x_only] {
            let grads = B::head_backward(
                xp.clone(),
                wp.clone(),
                fwd.z.clone(),
                fwd.dh.clone(),
                g.clone(),
                wanted,
                kernels,
            );
            let dx = grads.x.expect("dX wanted");
            assert_eq!(dx.dtype(), dtype, "{context}: dX's dtype");
            assert_eq!(
                dx.shape().dims::<2>(),
                [batch, inputs],
                "{context}: dX's shape"
            );
            for t in [grads.weight, grads.bias].into_iter().flatten() {
                assert_eq!(t.dtype(), dtype, "{context}: dW's and db's dtype");
            }
        }
    }
}
