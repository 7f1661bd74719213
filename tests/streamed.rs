//! The streamed large-C path (C > 32 on the CubeCL backends): the loss and the gradients in one
//! pass over the batch, chunk by chunk, with no f32 `[B, C]` tensor. Gated against the independent
//! reference (stock Burn ops on NdArray, f64) and against the same backend's six stages, over
//! shapes that cross every chunk switch (chunks of one row, ragged last chunks, a prime B,
//! chunks of 128 rows, one chunk), with the numerical hazards (logits near 1e4, dead rows,
//! confident rows, non-contiguous views, an upstream gradient, another loss beside the head).
//!
//! Small shapes cross many chunks through `HeadOptions::chunk_elements`. On NdArray (no
//! streamed path) the same tests check the default `head_step`.

mod common;

use burn::backend::ndarray::NdArrayDevice;
use burn::backend::{Autodiff, NdArray};
use burn::tensor::{DType, Tensor};
use burn_fused_head::backend::{HeadStep, HeadWanted};
use burn_fused_head::{
    FusedHeadBackend, HeadActivation, HeadPrecision, fused_linear_cross_entropy,
    fused_linear_cross_entropy_and_predictions,
};
use burn_fused_head_testing::gates::{gate, run_stages, values};
use burn_fused_head_testing::reference::{HeadData, stock_head_loss};
use common::*;

/// (B, I, C, chunk elements): chunks of one row; of 3 rows with a ragged last (7 = 3 + 3 + 1);
/// a prime B in chunks of 13 rows; chunks of 128 rows (200 fit; the rule rounds down) and a
/// ragged 3; chunks of 5 rows over a K of 140; one chunk (the rule); exactly one full chunk;
/// C = 130 (the row kernel reads 2 classes at a time, 4 at C = 40, 100, 1000, 1 at 33, 129,
/// 257) in chunks of 13 rows; C = 65540 (cubes of 1024 units on CUDA) in one chunk.
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (2, 5, 33, 1),
    (7, 13, 33, 33 * 3),
    (97, 40, 129, 129 * 13),
    (131, 24, 1000, 1000 * 200),
    (257, 140, 40, 40 * 5),
    (601, 37, 257, 0),
    (64, 258, 100, 100 * 64),
    (97, 40, 130, 130 * 13),
    (3, 8, 65540, 0),
];

/// The op's loss and gradients, read back as f64 (`None` where not returned).
#[derive(Debug, Clone, PartialEq)]
struct Streamed {
    loss: f64,
    dx: Option<Vec<f64>>,
    dw: Option<Vec<f64>>,
    db: Option<Vec<f64>>,
}

/// `B::head_step` on `data` (f32), chunks of at most `elements` floats.
fn streamed<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    wanted: HeadWanted,
    options: impl TestOptions,
    elements: usize,
) -> Streamed {
    let kernels = chunks(options, elements).kernels();
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    {
        let out = B::head_step(
            x.into_primitive().tensor(),
            w.into_primitive().tensor(),
            b.into_primitive().tensor(),
            labels.into_primitive(),
            HeadStep::loss().with_wanted(wanted),
            kernels,
        );
        let (loss, grads) = (out.loss, out.gradients);
        let read2 = |t| {
            values(Tensor::<B, 2>::from_primitive(
                burn::tensor::TensorPrimitive::Float(t),
            ))
        };
        let read1 = |t| {
            values(Tensor::<B, 1>::from_primitive(
                burn::tensor::TensorPrimitive::Float(t),
            ))
        };
        Streamed {
            loss: read1(loss)[0],
            dx: grads.x.map(read2),
            dw: grads.weight.map(read2),
            db: grads.bias.map(read1),
        }
    }
}

/// Loss and gradients of `scale * op` through `Autodiff<B>`, chunks of at most `elements`.
fn autodiff_grads<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    scale: f64,
    elements: usize,
) -> HeadGrads {
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let options = chunks(HeadPrecision::Exact, elements);
    head_grads(x, w, b, labels, scale, |x, w, b, l| {
        fused_linear_cross_entropy(x, w, Some(b), l, &options)
    })
}

/// `0.5 loss + 0.01 sum(W^2)`: the head's loss beside another loss on W.
fn beside_another_loss<B: burn::tensor::backend::Backend>(
    loss: Tensor<B, 1>,
    w: Tensor<B, 2>,
) -> Tensor<B, 1> {
    loss * 0.5 + (w.clone() * w).sum() * 0.01
}

/// The tests of `streamed/cases.rs`, each written once there, on one backend `B`.
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            include!("streamed/cases.rs");
        }
    };
}

on_backend!(ndarray, NdArray<f32>, NdArrayDevice::Cpu);
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

/// CUDA: a step on one GPU timeline (the row kernel compiled outside CubeCL's server and
/// launched on cuBLASLt's stream) gives the bits of the host-ordered route (the same kernel
/// launched by CubeCL on its stream, two host waits per chunk), in every precision, with the
/// loss options, the LM terms, the statistics and the predictions, over ragged chunks.
#[cfg(feature = "cuda")]
mod one_timeline {
    use super::*;
    use burn::tensor::Int;
    use burn_fused_head::{
        HeadAccumulation, HeadLogits, HeadOptions, HeadReduction,
        fused_linear_cross_entropy_with_token_stats,
    };
    use burn_fused_head_testing::reference::HeadData;

    /// Every output of one tracked call and of one predictions call, read back as f64 (exact
    /// from f32 and bf16, so equal values are equal bits).
    fn outputs<B: FusedHeadBackend>(
        device: &B::Device,
        data: &HeadData,
        options: &HeadOptions,
        dtype: DType,
    ) -> Vec<Vec<f64>> {
        let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, dtype);
        let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
        let (loss, stats) = fused_linear_cross_entropy_with_token_stats(
            x.clone(),
            w.clone(),
            Some(b.clone()),
            labels.clone(),
            options,
        );
        let grads = (loss.clone() * 0.75).sum().backward();
        let (_, predictions) = fused_linear_cross_entropy_and_predictions(
            x.clone().detach(),
            w.clone().detach(),
            Some(b.clone().detach()),
            labels,
            options,
        );
        let predictions: Tensor<Autodiff<B>, 1, Int> = predictions;
        vec![
            values(loss),
            values(x.grad(&grads).expect("dX")),
            values(w.grad(&grads).expect("dW")),
            values(b.grad(&grads).expect("db")),
            values(stats.log_sum_exp),
            values(stats.target_log_prob),
            values(stats.entropy),
            predictions
                .into_data()
                .convert::<i64>()
                .to_vec::<i64>()
                .expect("predictions")
                .into_iter()
                .map(|p| p as f64)
                .collect(),
        ]
    }

    fn same_bits<B: FusedHeadBackend>(device: &B::Device) {
        // B = 97 in chunks of 13 rows (7 full, a ragged 6), C = 129 (rows read one element at
        // a time); B = 61 <= 2 I, C = 130 (two at a time): bf16 keeps dZ for the whole batch.
        for (batch, inputs, classes) in [(97, 40, 129), (61, 40, 130)] {
            same_bits_at::<B>(device, batch, inputs, classes);
        }
    }

    fn same_bits_at<B: FusedHeadBackend>(
        device: &B::Device,
        batch: usize,
        inputs: usize,
        classes: usize,
    ) {
        let data = HeadData::random(811, batch, inputs, classes);
        // The same rows with one ignored.
        let mut ignoring = data.clone();
        ignoring.labels[5] = -100;
        let weights: Vec<f32> = (0..classes).map(|c| 0.5 + (c % 5) as f32 * 0.25).collect();
        let cases = [
            (
                &data,
                HeadOptions::new().with_activation(HeadActivation::Relu),
            ),
            (
                &data,
                HeadOptions::new()
                    .with_logit_scale(Some(0.8))
                    .with_softcap(Some(6.0))
                    .with_z_loss(Some(1e-3)),
            ),
            (
                &ignoring,
                HeadOptions::new()
                    .with_ignore_index(Some(-100))
                    .with_class_weights(Some(weights))
                    .with_reduction(HeadReduction::Sum),
            ),
        ];
        // (dtype, precision, logits, accumulation): bf16 with its logits rounded too, with the
        // f32 accumulation (P at the whole-batch dZ's rows where B <= 2 I) and lean.
        let (f32_logits, rounded) = (HeadLogits::F32, HeadLogits::Rounded);
        let (sums, lean) = (HeadAccumulation::F32, HeadAccumulation::Lean);
        let precisions = [
            (DType::F32, HeadPrecision::Exact, f32_logits, sums),
            (DType::F32, HeadPrecision::Tf32, f32_logits, sums),
            (DType::BF16, HeadPrecision::Exact, f32_logits, sums),
            (DType::BF16, HeadPrecision::Exact, rounded, sums),
            (DType::BF16, HeadPrecision::Exact, rounded, lean),
        ];
        let names = [
            "loss",
            "dX",
            "dW",
            "db",
            "lse",
            "log p",
            "entropy",
            "predictions",
        ];
        for (data, options) in cases {
            for (dtype, precision, logits, accumulation) in precisions {
                let options = options
                    .clone()
                    .with_precision(precision)
                    .with_logits(logits)
                    .with_accumulation(accumulation)
                    .with_chunk_elements(Some(classes * 13));
                let before = burn_fused_head::testing::one_timeline_steps();
                let whole_before = burn_fused_head::testing::whole_batch_dz_steps();
                let one = outputs::<B>(device, data, &options, dtype);
                assert!(
                    burn_fused_head::testing::one_timeline_steps() > before,
                    "the step ran on one GPU timeline ({dtype:?}, {options:?})"
                );
                let host = burn_fused_head::testing::host_ordered(|| {
                    outputs::<B>(device, data, &options, dtype)
                });
                // Two tracked calls, one per route (the count does not say which route); the
                // tests of this binary may run at once, so at least these.
                let whole = burn_fused_head::testing::whole_batch_dz_steps() - whole_before;
                if dtype == DType::BF16 && batch <= 2 * inputs && accumulation == sums {
                    assert!(
                        whole >= 2,
                        "B={batch}: the tracked calls kept the whole batch's dZ"
                    );
                }
                for ((name, a), b) in names.iter().zip(&one).zip(&host) {
                    // Equal bits (f32 and bf16 are exact in f64; NaN equals NaN here).
                    let differ = a
                        .iter()
                        .zip(b)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    assert!(
                        a.len() == b.len() && differ == 0,
                        "{name}: {differ} of {} elements differ between the routes \
                         ({dtype:?}, {options:?})",
                        a.len()
                    );
                }
            }
        }
    }

    /// One of the two tests below at a time: `testing::host_ordered` is process-wide, so the
    /// other test's host-ordered call would take this one's one-timeline call off its route.
    static ROUTES: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn one_timeline_gives_the_host_ordered_bits_fusion() {
        let _routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
        same_bits::<burn::backend::Cuda>(&burn::backend::cuda::CudaDevice::default());
    }

    #[test]
    fn one_timeline_gives_the_host_ordered_bits_raw() {
        let _routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
        same_bits::<burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>>(
            &burn::backend::cuda::CudaDevice::default(),
        );
    }
}
