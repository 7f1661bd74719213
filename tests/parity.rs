//! The backend-parity suite: every stage and the whole op on the backend under test (f32)
//! against the independent reference (stock Burn ops on NdArray, f64), element-wise, under the
//! gate `|got - ref| <= 2e-5 + 2e-4 |ref|`.
//!
//! Each test is written once, in `parity/cases.rs`, and runs on every backend of the build: one
//! `on_backend!` line per backend at the bottom (`cargo test --features wgpu` or `cuda` adds
//! the kernels' backends; another CubeCL runtime is one more line).

mod common;

use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn::backend::ndarray::NdArrayDevice;
use burn::backend::{Autodiff, NdArray};
use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};
use burn_fused_head::backend::HeadWanted;
use burn_fused_head::{
    FusedHeadBackend, HeadActivation, HeadOptions, HeadPrecision, fused_linear_cross_entropy,
    fused_linear_cross_entropy_and_predictions,
};
use burn_fused_head_testing::gates::{
    GATE_NAMES, gate, run_fast_path, run_stages, run_stages_tf32,
};
use burn_fused_head_testing::reference::{HeadData, stock_head_loss};
use common::*;

/// (B, I, C): ones, primes, just past powers of two, C = 1, one row, and realistic sizes.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 1, 2),
    (1, 7, 3),
    (3, 1, 5),
    (2, 3, 1),
    (7, 13, 5),
    (17, 31, 11),
    (257, 3, 10),
    (5, 1025, 7),
    (3, 5, 1025),
    (64, 128, 10),
    (300, 64, 257),
];

/// (B, I, C) across the fast path's switches: C around the small-C limit (32) and the
/// vector-width steps of the backward (8, 16), I divisible by 4, by 2 only and by neither (the
/// vector widths), I past one column tile (256 vectors), B past the backward's row chunks (64,
/// where the one-chunk partial sums are used as they are), B on both
/// sides of the forward's one-cube launch (which writes the mean itself), tiles of 128 with
/// ragged edges, 17 rows of tiles (B = 2100), a
/// weight gradient with too few tiles, whose K (= B) is split into slices, and B past the
/// row-tiled small-C forward's threshold (16384; 128 rows per cube up to C = 16, 32 above;
/// ragged last cubes, I of 9 vectors (two tiles of 8), 3 vectors and 9 scalars).
const FAST_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (3, 1030, 8),
    (130, 70, 9),
    (65, 520, 16),
    (200, 3, 17),
    (97, 300, 32),
    (2, 5, 33),
    (130, 13, 129),
    (257, 140, 40),
    (601, 37, 7),
    (601, 20, 40),
    (300, 1100, 5),
    (60, 64, 12),
    (2100, 8, 40),
    (16384, 36, 10),
    (16450, 6, 20),
    (16391, 9, 3),
];

/// (B, I, C) for the TF32 products (C > 32): ragged 128-tiles on every side, I divisible by 4,
/// by 2 only and by neither, and C likewise (the vector widths of the operands), K past one
/// step of 16 and not a multiple of it, weight gradients split into slices of K
/// ((257, 140, 40): 2 slices, (601, 20, 40): 3), and 17 rows of tiles.
const TF32_SHAPES: &[(usize, usize, usize)] = &[
    (2, 5, 33),
    (130, 13, 129),
    (257, 140, 40),
    (601, 20, 40),
    (64, 258, 100),
    (200, 1024, 36),
    (2100, 8, 40),
];

/// The stage outputs of the TF32 reference (stock ops on NdArray f64, with TF32's rounding of
/// the products' operands emulated) for `data` and upstream gradient `grad`.
fn tf32_reference_stages(
    data: &HeadData,
    grad: f64,
) -> burn_fused_head_testing::gates::StageOutputs {
    let (x, w, b, labels) = data.tensors::<Reference>(&reference_device(), DType::F64);
    run_stages_tf32(x, w, b, labels, grad)
}

/// `name` as computed with `HeadPrecision::Tf32` must be outside the exact gates of the exact
/// run somewhere: the TF32 tensor cores did run.
fn assert_tensor_cores_ran(context: &str, name: &str, tf32: &[f64], exact: &[f64]) {
    let report = burn_fused_head_testing::gates::gate(name, tf32, exact);
    assert!(
        !report.passed(),
        "{context}: {name} within the exact gates of exact mode everywhere ({report}); \
         the TF32 products did not run"
    );
}

/// The tests of `parity/cases.rs`, each written once there, on one backend `B`.
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            include!("parity/cases.rs");
        }
    };
}

on_backend!(ndarray, NdArray<f32>, NdArrayDevice::Cpu);
/// Burn 0.21 deprecates its Candle backend; the suite runs on it while Burn ships it.
#[cfg(feature = "candle")]
#[allow(deprecated)]
type Candle = burn::backend::Candle;
#[cfg(feature = "flex")]
on_backend!(flex, burn::backend::Flex, Default::default());
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
