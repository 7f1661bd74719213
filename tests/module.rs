//! `FusedHead` as a Burn module: it trains through `loss.backward()` and an optimizer step,
//! behind a stock `Linear`, and survives a record round trip. One instantiation per backend.

use burn::module::Module;
use burn::module::Param;
use burn::nn::Linear;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor};
use burn_fused_head::reference::{HeadData, seeded_uniform};
use burn_fused_head::{FusedHead, FusedHeadBackend, FusedHeadConfig, HeadPrecision};

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    hidden: Linear<B>,
    head: FusedHead<B>,
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
            head: FusedHead {
                weight: param(3, [4, 16], 0.25),
                bias: vector(4, 4, 0.25),
                precision: HeadPrecision::Exact,
            },
        }
    }

    fn loss(&self, x: Tensor<B, 2>, labels: Tensor<B, 1, burn::tensor::Int>) -> Tensor<B, 1> {
        let hidden = burn::tensor::activation::relu(self.hidden.forward(x)); // [B, 16]
        self.head.forward(hidden, labels) // [1]
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

/// 120 SGD steps on one batch of learnable labels: the loss must fall to under half its first
/// value, and W must have moved.
fn trains_with_optimizer<B>(device: &B::Device)
where
    B: AutodiffBackend + FusedHeadBackend,
    B::InnerBackend: FusedHeadBackend,
{
    let data = teacher_data(64, 8, 4);
    let (x, _, _, labels) = data.tensors::<B>(device, DType::F32);
    let mut model = Mlp::<B>::new(device);
    let before = model.head.weight.val().into_data();
    let mut optim = SgdConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..120 {
        let loss = model.loss(x.clone(), labels.clone());
        losses.push(
            loss.clone()
                .into_scalar()
                .to_string()
                .parse::<f64>()
                .unwrap(),
        );
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(0.5, model, grads);
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!(
        losses.iter().all(|l| l.is_finite()),
        "non-finite loss: {losses:?}"
    );
    assert!(last < 0.5 * first, "loss did not fall: {first} -> {last}");
    assert_ne!(
        model.head.weight.val().into_data(),
        before,
        "W did not move"
    );
}

/// Save to bytes, load into a fresh module: the same logits, bit for bit.
fn record_round_trip<B: FusedHeadBackend>(device: &B::Device) {
    let data = HeadData::random(9, 6, 16, 5);
    let (x, _, _, _) = data.tensors::<B>(device, DType::F32);
    let head = FusedHeadConfig::new(16, 5).init::<B>(device);
    let expected = head.logits(x.clone()).into_data();
    assert!(
        expected.iter::<f32>().any(|v| v != 0.0),
        "degenerate logits"
    );
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = recorder.record(head.into_record(), ()).unwrap();
    let loaded = FusedHeadConfig::new(16, 5)
        .init::<B>(device)
        .load_record(recorder.load(bytes, device).unwrap());
    assert_eq!(expected, loaded.logits(x).into_data());
}

/// The config's precision reaches the module (default exact; not part of the record) and its
/// loss is the function's with that precision, bit for bit.
fn precision_from_config<B: FusedHeadBackend>(device: &B::Device) {
    assert_eq!(FusedHeadConfig::new(16, 40).precision, HeadPrecision::Exact);
    let data = HeadData::random(10, 24, 16, 40);
    let (x, _, _, labels) = data.tensors::<B>(device, DType::F32);
    let head = FusedHeadConfig::new(16, 40)
        .with_precision(HeadPrecision::Tf32)
        .init::<B>(device);
    assert_eq!(head.precision, HeadPrecision::Tf32);
    let want = burn_fused_head::linear_relu_cross_entropy_with(
        x.clone(),
        head.weight.val(),
        head.bias.val(),
        labels.clone(),
        HeadPrecision::Tf32,
    );
    assert_eq!(head.forward(x, labels).into_data(), want.into_data());
    let record = head.clone().into_record();
    let exact = FusedHeadConfig::new(16, 40)
        .init::<B>(device)
        .load_record(record);
    assert_eq!(
        exact.precision,
        HeadPrecision::Exact,
        "a record carries no precision"
    );
}

macro_rules! module_suite {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            type B = $backend;

            #[test]
            fn trains_with_optimizer() {
                super::trains_with_optimizer::<burn::backend::Autodiff<B>>(&$device);
            }
            #[test]
            fn record_round_trip() {
                super::record_round_trip::<B>(&$device);
            }
            #[test]
            fn precision_from_config() {
                super::precision_from_config::<B>(&$device);
            }
        }
    };
}

module_suite!(
    ndarray,
    burn::backend::NdArray<f32>,
    burn::backend::ndarray::NdArrayDevice::Cpu
);
#[cfg(feature = "wgpu")]
module_suite!(
    wgpu_fusion,
    burn::backend::Vulkan,
    burn::backend::wgpu::WgpuDevice::default()
);
#[cfg(feature = "cuda")]
module_suite!(
    cuda_fusion,
    burn::backend::Cuda,
    burn::backend::cuda::CudaDevice::default()
);
