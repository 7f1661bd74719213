//! The language-model terms of `HeadOptions` (the logit scale, the softcap, the z-loss) and the
//! per-row statistics (`fused_linear_cross_entropy_with_token_stats`), alone, together and
//! with the cross-entropy options, against the formula below in stock Burn ops on NdArray f64
//! (`common::terms_formula`, which the fuzzer shares; no code of the crate's own), its
//! gradients from Burn's autodiff:
//!
//! ```text
//! H    = cap tanh(s act(Z) / cap)   (s act(Z) without a softcap)
//! lse  = log sum_c exp(H[c])        lp = H - lse
//! L[r] = -sum_c A[r, c] lp[c] + zeta lse^2     A the smoothed, weighted target row (0 if ignored)
//! ```
//!
//! Each test is written once, in `logit_terms/cases.rs`, and runs on every backend of the build;
//! C = 5 (the materialized path) and C = 40 (on the CubeCL backends the streamed row kernel,
//! except with label smoothing).

mod common;

use burn::backend::Autodiff;
use burn::module::Param;
use burn::tensor::{DType, Tensor, TensorData};
use burn_fused_head::backend::{HeadStep, HeadWanted, RowTerms};
use burn_fused_head::{
    FusedHeadBackend, FusedLinearCrossEntropy, FusedLinearCrossEntropyConfig, HeadActivation,
    HeadOptions, HeadReduction, fused_linear_cross_entropy,
    fused_linear_cross_entropy_and_predictions, fused_linear_cross_entropy_with_token_stats,
};
use burn_fused_head_testing::gates::gate;
use burn_fused_head_testing::reference::HeadData;
use common::{Outcome, Reference, assert_gates, reference_device, terms_formula, to_f64, to_i64};

/// The same through our op on `Autodiff<B>` in f32, the statistics from the same call.
fn ours<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    loss: &HeadOptions,
    upstream: &[f64],
) -> Outcome {
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let (out, stats) = fused_linear_cross_entropy_with_token_stats(
        x.clone(),
        w.clone(),
        Some(b.clone()),
        labels,
        loss,
    );
    let v = Tensor::<Autodiff<B>, 1>::from_data(
        TensorData::new(upstream.to_vec(), [upstream.len()]).convert_dtype(DType::F32),
        (device, DType::F32),
    );
    let grads = (out.clone() * v).sum().backward();
    Outcome {
        out: to_f64(out),
        dx: to_f64(x.grad(&grads).unwrap()),
        dw: to_f64(w.grad(&grads).unwrap()),
        db: to_f64(b.grad(&grads).unwrap()),
        lse: to_f64(stats.log_sum_exp),
        log_prob: to_f64(stats.target_log_prob),
        entropy: to_f64(stats.entropy),
    }
}

/// [`ours`] through `fused_linear_cross_entropy` (no statistics asked for: those of the
/// result are left empty).
fn ours_without_stats<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    loss: &HeadOptions,
    upstream: &[f64],
) -> Outcome {
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let out = fused_linear_cross_entropy(x.clone(), w.clone(), Some(b.clone()), labels, loss);
    let v = Tensor::<Autodiff<B>, 1>::from_data(
        TensorData::new(upstream.to_vec(), [upstream.len()]).convert_dtype(DType::F32),
        (device, DType::F32),
    );
    let grads = (out.clone() * v).sum().backward();
    Outcome {
        out: to_f64(out),
        dx: to_f64(x.grad(&grads).unwrap()),
        dw: to_f64(w.grad(&grads).unwrap()),
        db: to_f64(b.grad(&grads).unwrap()),
        lse: Vec::new(),
        log_prob: Vec::new(),
        entropy: Vec::new(),
    }
}

/// One upstream value per element of the result.
fn upstream(loss: &HeadOptions, batch: usize) -> Vec<f64> {
    match loss.reduction {
        HeadReduction::None => (0..batch).map(|r| 0.5 + (r % 7) as f64 * 0.25).collect(),
        _ => vec![0.7],
    }
}

/// A batch whose labels at the given rows are replaced.
fn data(
    seed: u64,
    batch: usize,
    inputs: usize,
    classes: usize,
    labels: &[(usize, i64)],
) -> HeadData {
    let mut data = HeadData::random(seed, batch, inputs, classes);
    for &(r, y) in labels {
        data.labels[r] = y;
    }
    data
}

/// Ours on `B` against the formula under the gates, both activations.
fn check<B: FusedHeadBackend>(
    device: &B::Device,
    context: &str,
    data: &HeadData,
    loss: &HeadOptions,
) {
    check_with_gain::<B>(device, context, data, loss, 1.0);
}

/// [`check`] with the upstream gradient times `gain` (to bring tiny gradients above the gate's
/// absolute term).
fn check_with_gain<B: FusedHeadBackend>(
    device: &B::Device,
    context: &str,
    data: &HeadData,
    loss: &HeadOptions,
    gain: f64,
) {
    for act in [HeadActivation::Identity, HeadActivation::Relu] {
        let loss = loss.clone().with_activation(act);
        let u: Vec<f64> = upstream(&loss, data.batch)
            .iter()
            .map(|v| v * gain)
            .collect();
        let got = ours::<B>(device, data, &loss, &u);
        let want = terms_formula(data, &loss, &u);
        assert_gates(
            &format!("{context}, {act:?}"),
            &[
                gate("result", &got.out, &want.out),
                gate("dX", &got.dx, &want.dx),
                gate("dW", &got.dw, &want.dw),
                gate("db", &got.db, &want.db),
                gate("log_sum_exp", &got.lse, &want.lse),
                gate("target_log_prob", &got.log_prob, &want.log_prob),
                gate("entropy", &got.entropy, &want.entropy),
            ],
        );
        // The same without the statistics: a logit scale, a softcap and a z-loss alone then
        // take the plain route where the backend streams (no row weight built).
        let got = ours_without_stats::<B>(device, data, &loss, &u);
        assert_gates(
            &format!("{context}, {act:?}, without the statistics"),
            &[
                gate("result", &got.out, &want.out),
                gate("dX", &got.dx, &want.dx),
                gate("dW", &got.dw, &want.dw),
                gate("db", &got.db, &want.db),
            ],
        );
    }
}

/// The tests of `logit_terms/cases.rs` on one backend `B`.
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            include!("logit_terms/cases.rs");
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

/// The options are checked before anything runs.
#[test]
#[should_panic(expected = "HeadOptions::softcap must be finite and > 0")]
fn a_softcap_of_zero_is_refused() {
    let device = Default::default();
    let data = HeadData::random(1, 2, 3, 4);
    let (x, w, b, labels) = data.tensors::<burn::backend::NdArray>(&device, DType::F32);
    let options = HeadOptions::new().with_softcap(Some(0.0));
    fused_linear_cross_entropy(x, w, Some(b), labels, &options);
}

#[test]
#[should_panic(expected = "HeadOptions::z_loss must be finite and >= 0")]
fn a_negative_z_loss_is_refused() {
    let device = Default::default();
    let data = HeadData::random(1, 2, 3, 4);
    let (x, w, b, labels) = data.tensors::<burn::backend::NdArray>(&device, DType::F32);
    let options = HeadOptions::new().with_z_loss(Some(-1e-4));
    fused_linear_cross_entropy(x, w, Some(b), labels, &options);
}
