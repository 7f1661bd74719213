//! `FusedLinearCrossEntropy` as a Burn module: it trains through `loss.backward()` and an
//! optimizer step, behind a stock `Linear`, survives a record round trip, and takes the place
//! of a `Linear` it is made from. Each test is written once, in
//! `module/cases.rs`, and runs on every backend of the build (`on_backend!` at the bottom).

mod common;

use burn::module::Module;
use burn::module::Param;
use burn::nn::Linear;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use burn_fused_head::{
    FusedHeadBackend, FusedLinearCrossEntropy, FusedLinearCrossEntropyConfig, HeadActivation,
    HeadOptions, HeadPrecision, fused_linear_cross_entropy,
};
use burn_fused_head_testing::reference::{HeadData, seeded_uniform};

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    hidden: Linear<B>,
    head: FusedLinearCrossEntropy<B>,
}

impl<B: FusedHeadBackend> Mlp<B> {
    /// Weights from a fixed seed, the same on every backend.
    fn new(device: &B::Device) -> Self {
        let param = |seed, shape: [usize; 2], bound| {
            Param::from_tensor(seeded_uniform(seed, shape, bound, device))
        };
        let vector = |seed, n, bound| Param::from_tensor(seeded_uniform(seed, [n], bound, device));
        Self {
            hidden: Linear {
                weight: param(1, [8, 16], 0.35),
                bias: Some(vector(2, 16, 0.35)),
            },
            head: FusedLinearCrossEntropy {
                weight: param(3, [4, 16], 0.25),
                bias: Some(vector(4, 4, 0.25)),
                options: HeadOptions::new().with_activation(HeadActivation::Relu),
            },
        }
    }

    fn loss(&self, x: Tensor<B, 2>, labels: Tensor<B, 1, burn::tensor::Int>) -> Tensor<B, 1> {
        let hidden = burn::tensor::activation::relu(self.hidden.forward(x)); // [B, 16]
        self.head.forward_loss(hidden, labels) // [1]
    }
}

/// Inputs whose labels a linear teacher assigns (`argmax_c x . t_c`), so that they can be learned.
fn teacher_data(batch: usize, inputs: usize, classes: usize) -> HeadData {
    let mut data = HeadData::random(5, batch, inputs, classes);
    let teacher = HeadData::random(6, 1, inputs, classes).weight; // [C, I]
    for r in 0..batch {
        let score = |c: usize| -> f32 {
            (0..inputs)
                .map(|k| data.x[r * inputs + k] * teacher[c * inputs + k])
                .sum()
        };
        data.labels[r] = (0..classes)
            .max_by(|a, b| score(*a).total_cmp(&score(*b)))
            .unwrap() as i64;
    }
    data
}

/// The tests of `module/cases.rs`, each written once there, on one backend `B`.
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            include!("module/cases.rs");
        }
    };
}

on_backend!(
    ndarray,
    burn::backend::NdArray<f32>,
    burn::backend::ndarray::NdArrayDevice::Cpu
);
#[cfg(feature = "wgpu")]
on_backend!(wgpu_fusion, burn::backend::Vulkan, common::vulkan_device());
#[cfg(feature = "cuda")]
on_backend!(
    cuda_fusion,
    burn::backend::Cuda,
    burn::backend::cuda::CudaDevice::default()
);
