//! Bad input, extreme values and long runs: clear errors before any kernel runs, NaN rather than
//! silent wrong answers, nothing out of bounds, the same bits every time.

mod common;

use burn::backend::Autodiff;
use burn::tensor::{DType, Int, Tensor};
use burn_fused_head::{
    FusedHeadBackend, HeadPrecision, fused_linear_cross_entropy, validate_targets,
};
use burn_fused_head_testing::gates::run_stages;
use burn_fused_head_testing::reference::HeadData;
use common::*;

/// Runs `f` and returns its panic message (the test fails if it does not panic).
fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Bit-identical loss and gradients: repeated calls, two threads at once, and another process.
fn fingerprint<B: FusedHeadBackend>(device: &B::Device) -> Vec<u64> {
    let data = HeadData::random(67, 129, 33, 17);
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    bits(head_grads(x, w, b, labels, 1.0, relu_loss))
}

/// The loss and gradients as bits, for bit-for-bit comparisons.
fn bits(g: HeadGrads) -> Vec<u64> {
    let values = std::iter::once(g.loss).chain(g.dx).chain(g.dw).chain(g.db);
    values.map(f64::to_bits).collect()
}

/// The tests of `edge_cases/cases.rs`, each written once there, on one backend `B`, with the
/// steps of the long run and a probe of the device memory in use (`None` where the backend
/// has no pool to read).
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr, $steps:expr, $memory:expr) => {
        mod $name {
            use super::*;

            type B = $backend;
            const LONG_RUN_STEPS: usize = $steps;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            fn memory_in_use() -> Option<u64> {
                $memory
            }

            include!("edge_cases/cases.rs");
        }
    };
}

on_backend!(
    ndarray,
    burn::backend::NdArray<f32>,
    burn::backend::ndarray::NdArrayDevice::Cpu,
    10_000,
    None
);
/// Burn 0.21 deprecates its Candle backend; the suite runs on it while Burn ships it.
#[cfg(feature = "candle")]
#[allow(deprecated)]
type Candle = burn::backend::Candle;
#[cfg(feature = "flex")]
on_backend!(flex, burn::backend::Flex, Default::default(), 10_000, None);
#[cfg(feature = "candle")]
on_backend!(candle, Candle, Default::default(), 10_000, None);
#[cfg(feature = "wgpu")]
on_backend!(
    wgpu_fusion,
    burn::backend::Vulkan,
    common::vulkan_device(),
    10_000,
    {
        use cubecl::Runtime;
        let client = burn::backend::wgpu::WgpuRuntime::client(&device());
        Some(client.memory_usage().unwrap().bytes_in_use)
    }
);
#[cfg(feature = "cuda")]
on_backend!(
    cuda_fusion,
    burn::backend::Cuda,
    burn::backend::cuda::CudaDevice::default(),
    10_000,
    {
        use cubecl::Runtime;
        let client = cubecl::cuda::CudaRuntime::client(&device());
        Some(client.memory_usage().unwrap().bytes_in_use)
    }
);

/// An unsupported dtype on the kernels' backends is refused with the supported list: f64 (the
/// kernels would drop its precision).
#[cfg(feature = "cuda")]
#[test]
fn cuda_refuses_f64() {
    let device = burn::backend::cuda::CudaDevice::default();
    let msg = panic_message(move || {
        let data = HeadData::random(73, 3, 4, 2);
        let (x, w, b, labels) = data.tensors::<burn::backend::Cuda>(&device, DType::F64);
        fused_linear_cross_entropy(x, w, Some(b), labels, &relu_options());
    });
    assert!(
        msg.contains("dtype F64 is not supported") && msg.contains("[F32, BF16, F16]"),
        "{msg}"
    );
}

/// Logits of about 1e4 with the identity (B = 64, I = 48, C = 100, X scaled by 1e3): each
/// logit is an f32 dot product of 48 terms of about 300, and in rows whose two largest logits
/// are close its rounding moves the softmax enough to take dW out of the gate. The stock-op
/// bodies compute their products in f64 on NdArray and round them once, and meet the gate on
/// every element of 16 such cases, against Burn's stock autodiff in f64.
#[test]
fn logits_of_1e4_meet_the_gate_on_ndarray() {
    type A = Autodiff<burn::backend::NdArray<f32>>;
    let device = burn::backend::ndarray::NdArrayDevice::Cpu;
    let mut failures = Vec::new();
    for seed in 0..16 {
        let mut data = HeadData::random(400 + seed, 64, 48, 100);
        data.x.iter_mut().for_each(|v| *v *= 1e3);
        let (x, w, b, labels) = data.tensors::<A>(&device, DType::F32);
        let identity = burn_fused_head::HeadOptions::new();
        let got = head_grads(x, w, b, labels, 1.0, |x, w, b, l| {
            fused_linear_cross_entropy(x, w, Some(b), l, &identity)
        });
        let want = stock_linear_grads(&data, 1.0);
        let reports = [
            burn_fused_head_testing::gates::gate("loss", &[got.loss], &[want.loss]),
            burn_fused_head_testing::gates::gate("dX", &got.dx, &want.dx),
            burn_fused_head_testing::gates::gate("dW", &got.dw, &want.dw),
            burn_fused_head_testing::gates::gate("db", &got.db, &want.db),
        ];
        for report in reports.iter().filter(|r| !r.passed()) {
            failures.push(format!("seed {}: {report}", 400 + seed));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
