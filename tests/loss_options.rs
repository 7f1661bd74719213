//! `fused_linear_cross_entropy` under every cross-entropy option of `HeadOptions` (ignored rows, class weights,
//! label smoothing, the three reductions) against PyTorch's `cross_entropy` formula, written
//! here in stock Burn ops on NdArray f64 from a coefficient matrix built on the host (no code of
//! the crate's own), its gradients from Burn's autodiff. Each test is written once, in
//! `loss_options/cases.rs`, and runs on every backend of the build (`on_backend!` at the
//! bottom); both activations, C <= 32 (the materialized path) and C > 32 (on the CubeCL
//! backends, the streamed path, in chunks that split the batch).

mod common;

use burn::backend::Autodiff;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_fused_head::{
    FusedHeadBackend, HeadActivation, HeadOptions, HeadReduction, fused_linear_cross_entropy,
};
use burn_fused_head_testing::reference::HeadData;
use common::{Rng, assert_gates, opts, reference_device, terms_formula, to_f64, with_loss};

use burn_fused_head_testing::gates::gate;

/// The result (one value, or one per row) and the gradients of `sum(result * upstream)`.
#[derive(Debug)]
struct Outcome {
    out: Vec<f64>,
    dx: Vec<f64>,
    dw: Vec<f64>,
    db: Vec<f64>,
}

/// PyTorch's `cross_entropy(act(X W^T + b), labels, weight, ignore_index, reduction,
/// label_smoothing)` on NdArray f64, its gradients by Burn's autodiff: `L[r] = -sum_c A[r, c]
/// lp[r, c]` with `A[r, c] = (1 - e) w[y] [c = y] + (e / C) w[c]` (0 for an ignored row), the
/// mean dividing by the sum of `w[y]` over the rows not ignored. It is the LM terms' formula
/// with the terms off (`common::terms_formula`, no logit scale, softcap or z-loss).
fn pytorch(data: &HeadData, loss: &HeadOptions, act: HeadActivation, upstream: &[f64]) -> Outcome {
    let o = terms_formula(data, &loss.clone().with_activation(act), upstream);
    Outcome {
        out: o.out,
        dx: o.dx,
        dw: o.dw,
        db: o.db,
    }
}

/// The same through our op on `Autodiff<B>`, in f32.
fn ours<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    loss: &HeadOptions,
    act: HeadActivation,
    upstream: &[f64],
) -> Outcome {
    ours_in::<B>(device, data, loss, act, upstream, DType::F32)
}

/// [`ours`] with the floats in `dtype`.
fn ours_in<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    loss: &HeadOptions,
    act: HeadActivation,
    upstream: &[f64],
    dtype: DType,
) -> Outcome {
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, dtype);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let options = HeadOptions {
        activation: act,
        ..loss.clone()
    };
    let out = fused_linear_cross_entropy(x.clone(), w.clone(), Some(b.clone()), labels, &options);
    let v = Tensor::<Autodiff<B>, 1>::from_data(
        TensorData::new(upstream.to_vec(), [upstream.len()]).convert_dtype(dtype),
        (device, dtype),
    );
    let grads = (out.clone() * v).sum().backward();
    Outcome {
        out: to_f64(out),
        dx: to_f64(x.grad(&grads).unwrap()),
        dw: to_f64(w.grad(&grads).unwrap()),
        db: to_f64(b.grad(&grads).unwrap()),
    }
}

/// A batch of `batch` rows whose labels at `ignored_rows` become `ignore`.
fn data(
    seed: u64,
    batch: usize,
    inputs: usize,
    classes: usize,
    ignore: &[(usize, i64)],
) -> HeadData {
    let mut data = HeadData::random(seed, batch, inputs, classes);
    for &(r, y) in ignore {
        data.labels[r] = y;
    }
    data
}

/// One upstream value per element of the result: 0.7 for `[1]`, then a spread over rows.
fn upstream(loss: &HeadOptions, batch: usize) -> Vec<f64> {
    match loss.reduction {
        HeadReduction::None => (0..batch).map(|r| 0.5 + (r % 7) as f64 * 0.25).collect(),
        _ => vec![0.7],
    }
}

/// Ours on `B` against PyTorch's formula under the gates, both activations, with chunks of
/// `chunk` floats (0: the crate's rule).
fn check<B: FusedHeadBackend>(
    device: &B::Device,
    context: &str,
    data: &HeadData,
    loss: &HeadOptions,
    chunk: usize,
) {
    for act in [HeadActivation::Relu, HeadActivation::Identity] {
        let u = upstream(loss, data.batch);
        let chunked = loss
            .clone()
            .with_chunk_elements((chunk > 0).then_some(chunk));
        let got = ours::<B>(device, data, &chunked, act, &u);
        let want = pytorch(data, loss, act, &u);
        assert_gates(
            &format!("{context}, {act:?}"),
            &[
                gate("result", &got.out, &want.out),
                gate("dX", &got.dx, &want.dx),
                gate("dW", &got.dw, &want.dw),
                gate("db", &got.db, &want.db),
            ],
        );
    }
}

/// A random case: a shape on both sides of C = 32, ignored rows (`ignore_index` outside or
/// inside `[0, C)`, pad tokens), class weights in `[0.1, 2)`, a smoothing, a reduction and a
/// chunk size (0: the crate's rule; else 1 to 4 rows). At least one row is kept.
fn random_case(rng: &mut Rng) -> (HeadData, HeadOptions, usize) {
    let classes = rng.pick(&[2, 5, 17, 32, 33, 40, 70]);
    let (batch, inputs) = (1 + rng.below(24), 1 + rng.below(12));
    let mut data = HeadData::random(rng.next(), batch, inputs, classes);
    let mut loss = HeadOptions::new().with_reduction(rng.pick(&[
        HeadReduction::Mean,
        HeadReduction::Sum,
        HeadReduction::None,
    ]));
    // Class 0 is never ignored (row 0 keeps it); the others may be.
    let other = |rng: &mut Rng| 1 + rng.below(classes - 1);
    match rng.below(4) {
        0 => loss = loss.with_ignore_index(Some(-100)),
        1 => loss = loss.with_ignore_index(Some(other(rng) as i64)),
        2 => loss = loss.with_pad_tokens(Some(vec![other(rng), other(rng)])),
        _ => {}
    }
    for r in 1..batch {
        if rng.below(4) == 0 {
            data.labels[r] = loss.ignore_index.unwrap_or(data.labels[r]);
        }
    }
    data.labels[0] = 0;
    if rng.below(2) == 0 {
        let w = (0..classes)
            .map(|_| 0.1 + rng.below(19) as f32 * 0.1)
            .collect();
        loss = loss.with_class_weights(Some(w));
    }
    if rng.below(2) == 0 {
        loss = loss.with_smoothing(Some(rng.pick(&[0.05, 0.3, 1.0])));
    }
    let chunk = rng.pick(&[0, 1, 3, 4]) * classes;
    (data, loss, chunk)
}

/// The f64 route (NdArray in f64: the losses and weights in f64), every option at once.
#[test]
fn in_f64_on_ndarray_every_option_matches_pytorch() {
    type B = burn::backend::NdArray<f64>;
    let device = reference_device();
    let loss = HeadOptions::new()
        .with_ignore_index(Some(-100))
        .with_class_weights(Some((0..7).map(|k| 0.5 + k as f32 * 0.25).collect()))
        .with_smoothing(Some(0.2))
        .with_reduction(HeadReduction::Sum);
    let data = data(24, 9, 6, 7, &[(2, -100)]);
    for act in [HeadActivation::Relu, HeadActivation::Identity] {
        let got = ours_in::<B>(&device, &data, &loss, act, &[0.7], DType::F64);
        let want = pytorch(&data, &loss, act, &[0.7]);
        assert_gates(
            &format!("f64, {act:?}"),
            &[
                gate("result", &got.out, &want.out),
                gate("dX", &got.dx, &want.dx),
                gate("dW", &got.dw, &want.dw),
                gate("db", &got.db, &want.db),
            ],
        );
    }
}

/// The tests of `loss_options/cases.rs`, each written once there, on one backend `B`.
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            include!("loss_options/cases.rs");
        }
    };
}

on_backend!(
    ndarray,
    burn::backend::NdArray<f32>,
    burn::backend::ndarray::NdArrayDevice::Cpu
);
#[cfg(feature = "flex")]
on_backend!(flex, burn::backend::Flex, Default::default());
/// Burn 0.21 deprecates its Candle backend; the tests run on it while Burn ships it.
#[cfg(feature = "candle")]
#[allow(deprecated)]
type Candle = burn::backend::Candle;
#[cfg(feature = "candle")]
on_backend!(candle, Candle, Default::default());
#[cfg(feature = "wgpu")]
on_backend!(wgpu_fusion, burn::backend::Vulkan, common::vulkan_device());
#[cfg(feature = "wgpu")]
on_backend!(
    wgpu_raw,
    burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>,
    common::vulkan_device()
);
#[cfg(feature = "cuda")]
on_backend!(
    cuda_fusion,
    burn::backend::Cuda,
    burn::backend::cuda::CudaDevice::default()
);
#[cfg(feature = "cuda")]
on_backend!(
    cuda_raw,
    burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>,
    burn::backend::cuda::CudaDevice::default()
);
