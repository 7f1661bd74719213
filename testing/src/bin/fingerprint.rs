//! Fingerprints of what every path computes: a hash of the bits of the loss, the gradients, the
//! logits and the six stages' outputs, over shapes that cross every switch of the dispatch, on
//! every backend of the build. Two builds that print the same lines compute the same bits; a
//! restructuring that must not change behaviour is checked by diffing their output.
//!
//!   cargo run --release -p burn-fused-head-testing --features cuda --bin fingerprint > after.txt
//!   cargo run --release -p burn-fused-head-testing --features wgpu --bin fingerprint  # slow
//!
//! Without `cuda` or `wgpu` it fingerprints NdArray (the stock-op bodies).

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};
use burn_fused_head::{
    FusedHeadBackend, FusedLinearCrossEntropy, HeadActivation, HeadOptions, HeadPrecision,
    HeadReduction, fused_linear_cross_entropy, fused_linear_cross_entropy_and_predictions,
};
use burn_fused_head_testing::gates::{run_stages, values};
use burn_fused_head_testing::reference::HeadData;

/// (B, I, C) across the switches: the small-C planes (with the one-cube mean, several cubes,
/// 2 and 1 rows per plane), the row tiles (from B = 16384), the backward's chunks and stages
/// (B = 65601), C = 32 and 33, ragged tiles, split K, vector widths 4, 2 and 1, and a
/// realistic large C where cubek's TF32 kernel takes the products.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (60, 64, 12),
    (64, 128, 10),
    (601, 37, 7),
    (200, 3, 17),
    (97, 300, 32),
    (4096, 512, 10),
    (16391, 9, 3),
    (16450, 6, 20),
    (65601, 16, 5),
    (2, 5, 33),
    (130, 13, 129),
    (257, 140, 40),
    (2100, 8, 40),
    (300, 64, 257),
    (2048, 256, 1000),
];

/// FNV-1a over the f32 bits of `v` (every value came from an f32, so its f64 is exact).
fn hash(v: &[f64]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in v {
        for byte in (*x as f32).to_bits().to_le_bytes() {
            h = (h ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn run<B: AutodiffBackend + FusedHeadBackend>(backend: &str, device: &B::Device)
where
    B::InnerBackend: FusedHeadBackend,
{
    for (k, &(b, i, c)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(900 + k as u64, b, i, c);
        let name = format!("{backend} b{b}_i{i}_c{c}");
        for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
            if precision == HeadPrecision::Tf32 && c <= 32 {
                continue;
            }
            // The training step, every input tracked, upstream gradient 0.75.
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            let (x, w, bias) = (x.require_grad(), w.require_grad(), bias.require_grad());
            let loss = fused_linear_cross_entropy(
                x.clone(),
                w.clone(),
                Some(bias.clone()),
                labels.clone(),
                &relu(precision),
            );
            let grads = (loss.clone() * 0.75).backward();
            let grad = |t: Option<Tensor<B::InnerBackend, 2>>| hash(&values(t.expect("tracked")));
            println!(
                "{name} {precision:?} step loss {} dx {} dw {} db {}",
                hash(&values(loss)),
                grad(x.grad(&grads)),
                grad(w.grad(&grads)),
                hash(&values(bias.grad(&grads).expect("tracked"))),
            );
            // W alone tracked: the backward without dX or db.
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            let w = w.require_grad();
            let loss =
                fused_linear_cross_entropy(x, w.clone(), Some(bias), labels, &relu(precision));
            let grads = loss.backward();
            println!(
                "{name} {precision:?} weight-only dw {}",
                grad(w.grad(&grads))
            );
            // The logits on the inner backend.
            let (x, w, bias, _) = data.tensors::<B::InnerBackend>(device, DType::F32);
            let h = logits(x, w, bias, relu(precision));
            println!("{name} {precision:?} logits {}", hash(&values(h)));
        }
        // The six stages (the stage kernels), upstream gradient -1.5.
        let (x, w, bias, labels) = data.tensors::<B::InnerBackend>(device, DType::F32);
        let s = run_stages(x, w, bias, labels, -1.5);
        println!(
            "{name} stages z {} h {} loss_rows {} dh {} dz {} dw {} db {} dx {} loss {}",
            hash(&s.z),
            hash(&s.h),
            hash(&s.loss_rows),
            hash(&s.dh),
            hash(&s.dz),
            hash(&s.dw),
            hash(&s.db),
            hash(&s.dx),
            hash(&[s.loss])
        );
    }
}

/// The shapes of [`run_options`]: small C, the streamed path (one chunk and several) and the
/// materialized path of the loss options.
const OPTION_SHAPES: &[(usize, usize, usize)] = &[
    (60, 64, 12),
    (2, 5, 33),
    (130, 13, 129),
    (300, 64, 257),
    (2048, 256, 1000),
];

/// The identity, the predictions, the loss options and a small chunk budget: every input
/// tracked, each line a hash of the result and the gradients.
fn run_options<B: AutodiffBackend + FusedHeadBackend>(backend: &str, device: &B::Device)
where
    B::InnerBackend: FusedHeadBackend,
{
    let grads_of = |x: &Tensor<B, 2>, w: &Tensor<B, 2>, b: &Tensor<B, 1>, g: &B::Gradients| {
        format!(
            "dx {} dw {} db {}",
            hash(&values(x.grad(g).expect("tracked"))),
            hash(&values(w.grad(g).expect("tracked"))),
            hash(&values(b.grad(g).expect("tracked")))
        )
    };
    for (k, &(b, i, c)) in OPTION_SHAPES.iter().enumerate() {
        let data = HeadData::random(950 + k as u64, b, i, c);
        let name = format!("{backend} b{b}_i{i}_c{c}");
        let tracked = || {
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            (
                x.require_grad(),
                w.require_grad(),
                bias.require_grad(),
                labels,
            )
        };
        for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
            if precision == HeadPrecision::Tf32 && c <= 32 {
                continue;
            }
            let identity = HeadOptions::new()
                .with_precision(precision)
                .with_activation(HeadActivation::Identity);
            // The identity's step, upstream gradient 0.75, and its logits.
            let (x, w, bias, labels) = tracked();
            let loss = fused_linear_cross_entropy(
                x.clone(),
                w.clone(),
                Some(bias.clone()),
                labels,
                &identity,
            );
            let g = (loss.clone() * 0.75).backward();
            let grads = grads_of(&x, &w, &bias, &g);
            println!(
                "{name} {precision:?} identity loss {} {grads}",
                hash(&values(loss))
            );
            let (x, w, bias, _) = data.tensors::<B::InnerBackend>(device, DType::F32);
            let h = logits(x, w, bias, identity.clone());
            println!("{name} {precision:?} identity logits {}", hash(&values(h)));
            // The loss and the predictions, tracked (ReLU and identity).
            for activation in [HeadActivation::Relu, HeadActivation::Identity] {
                let options = HeadOptions::new()
                    .with_precision(precision)
                    .with_activation(activation);
                let (x, w, bias, labels) = tracked();
                let (loss, predictions) = fused_linear_cross_entropy_and_predictions(
                    x.clone(),
                    w.clone(),
                    Some(bias.clone()),
                    labels,
                    &options,
                );
                let g = loss.clone().backward();
                let predictions: Vec<f64> = predictions
                    .into_data()
                    .convert::<i64>()
                    .iter::<i64>()
                    .map(|p| p as f64)
                    .collect();
                println!(
                    "{name} {precision:?} {activation:?} predictions loss {} classes {} {}",
                    hash(&values(loss)),
                    hash(&predictions),
                    grads_of(&x, &w, &bias, &g)
                );
            }
            // The loss options: an ignored class, class weights, smoothing, each reduction.
            let weights: Vec<f32> = (0..c).map(|j| 0.5 + (j % 3) as f32 * 0.25).collect();
            let cases = [
                (
                    "ignore-weights-mean",
                    HeadOptions::new()
                        .with_ignore_index(Some(data.labels[0]))
                        .with_class_weights(Some(weights.clone())),
                ),
                (
                    "smoothing-sum",
                    HeadOptions::new()
                        .with_smoothing(Some(0.1))
                        .with_reduction(HeadReduction::Sum),
                ),
                (
                    "pad-none",
                    HeadOptions::new()
                        .with_pad_tokens(Some(vec![data.labels[b - 1] as usize]))
                        .with_reduction(HeadReduction::None),
                ),
            ];
            for (case, loss_options) in cases {
                for activation in [HeadActivation::Relu, HeadActivation::Identity] {
                    let options = HeadOptions {
                        activation,
                        precision,
                        ..loss_options.clone()
                    };
                    let (x, w, bias, labels) = tracked();
                    let out = fused_linear_cross_entropy(
                        x.clone(),
                        w.clone(),
                        Some(bias.clone()),
                        labels,
                        &options,
                    );
                    let n = out.dims()[0];
                    let upstream: Vec<f32> = (0..n).map(|r| 0.5 + (r % 4) as f32 * 0.25).collect();
                    let upstream = Tensor::<B, 1>::from_data(
                        burn::tensor::TensorData::new(upstream, [n]),
                        (device, DType::F32),
                    );
                    let g = (out.clone() * upstream).sum().backward();
                    println!(
                        "{name} {precision:?} {activation:?} {case} out {} {}",
                        hash(&values(out)),
                        grads_of(&x, &w, &bias, &g)
                    );
                }
            }
        }
        // A chunk budget of 1000 elements: chunks of a few rows.
        let (x, w, bias, labels) = tracked();
        let chunks = relu(HeadPrecision::Exact).with_chunk_elements(Some(1000));
        let loss =
            fused_linear_cross_entropy(x.clone(), w.clone(), Some(bias.clone()), labels, &chunks);
        let g = loss.clone().backward();
        println!(
            "{name} chunks-1000 loss {} {}",
            hash(&values(loss)),
            grads_of(&x, &w, &bias, &g)
        );
    }
}

/// bf16 tensors: the training step at small and large C, ReLU and identity.
#[cfg(feature = "cuda")]
fn run_bf16<B: AutodiffBackend + FusedHeadBackend>(backend: &str, device: &B::Device) {
    for (k, &(b, i, c)) in OPTION_SHAPES.iter().enumerate() {
        let data = HeadData::random(980 + k as u64, b, i, c).rounded_to(DType::BF16);
        for activation in [HeadActivation::Relu, HeadActivation::Identity] {
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::BF16);
            let (x, w, bias) = (x.require_grad(), w.require_grad(), bias.require_grad());
            let loss = fused_linear_cross_entropy(
                x.clone(),
                w.clone(),
                Some(bias.clone()),
                labels,
                &HeadOptions::new().with_activation(activation),
            );
            let g = loss.clone().backward();
            println!(
                "{backend} b{b}_i{i}_c{c} bf16 {activation:?} loss {} dx {} dw {} db {}",
                hash(&values(loss)),
                hash(&values(x.grad(&g).expect("tracked"))),
                hash(&values(w.grad(&g).expect("tracked"))),
                hash(&values(bias.grad(&g).expect("tracked")))
            );
        }
    }
}

/// The ReLU head's options with `precision`.
fn relu(precision: HeadPrecision) -> HeadOptions {
    HeadOptions::new()
        .with_activation(HeadActivation::Relu)
        .with_precision(precision)
}

/// The head's logits under `options` (the module's `forward`, on a head made from W and b).
fn logits<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    options: HeadOptions,
) -> Tensor<B, 2> {
    use burn::module::Param;
    let head = FusedLinearCrossEntropy {
        weight: Param::from_tensor(w),
        bias: Some(Param::from_tensor(b)),
        options,
    };
    head.forward(x)
}

fn main() {
    #[cfg(feature = "cuda")]
    {
        use burn::backend::{Autodiff, Cuda};
        type Raw = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
        let device = burn::backend::cuda::CudaDevice::default();
        run::<Autodiff<Cuda>>("Cuda", &device);
        run::<Autodiff<Raw>>("CubeBackend", &device);
        run_options::<Autodiff<Cuda>>("Cuda", &device);
        run_options::<Autodiff<Raw>>("CubeBackend", &device);
        run_bf16::<Autodiff<Cuda>>("Cuda", &device);
        run_bf16::<Autodiff<Raw>>("CubeBackend", &device);
        return;
    }
    #[cfg(all(feature = "wgpu", not(feature = "cuda")))]
    {
        use burn::backend::{Autodiff, Vulkan};
        burn_fused_head_testing::vulkan::require_driver();
        let device = burn::backend::wgpu::WgpuDevice::default();
        run::<Autodiff<Vulkan>>("Vulkan", &device);
        run_options::<Autodiff<Vulkan>>("Vulkan", &device);
        return;
    }
    #[allow(unreachable_code)]
    {
        use burn::backend::{Autodiff, NdArray};
        run::<Autodiff<NdArray<f32>>>("NdArray", &Default::default());
        run_options::<Autodiff<NdArray<f32>>>("NdArray", &Default::default());
    }
}
