//! The same bits for the same inputs, by construction (DESIGN.md, "Determinism"), checked over
//! a matrix: every cross-entropy option alone and all together, both activations, both
//! precisions, the small-C, streamed and materialized paths, fusion on and off; 8 calls of
//! each, and the whole matrix again in another process. Then many threads on one device at
//! once, each on another path, each getting the bits one thread alone gets, with the memory
//! in use back to its baseline after.

mod common;

use burn::backend::Autodiff;
use burn::tensor::DType;
use burn_fused_head::{
    FusedHeadBackend, HeadAccumulation, HeadActivation, HeadLogits, HeadOptions, HeadPrecision,
    HeadReduction, fused_linear_cross_entropy_and_predictions,
};
use burn_fused_head_testing::reference::HeadData;
use common::to_f64;

/// The loss options of the matrix, by name: each alone, then all together.
fn loss_options(classes: usize) -> Vec<(&'static str, HeadOptions)> {
    let weights: Vec<f32> = (0..classes).map(|c| 0.5 + (c % 4) as f32 * 0.375).collect();
    let all = HeadOptions::new()
        .with_ignore_index(Some(-100))
        .with_pad_tokens(Some(vec![1]))
        .with_class_weights(Some(weights.clone()))
        .with_smoothing(Some(0.1));
    vec![
        ("plain", HeadOptions::new()),
        (
            "ignore_index",
            HeadOptions::new().with_ignore_index(Some(-100)),
        ),
        (
            "pad_tokens",
            HeadOptions::new().with_pad_tokens(Some(vec![1])),
        ),
        (
            "class_weights",
            HeadOptions::new().with_class_weights(Some(weights)),
        ),
        ("smoothing", HeadOptions::new().with_smoothing(Some(0.1))),
        ("sum", HeadOptions::new().with_reduction(HeadReduction::Sum)),
        (
            "none",
            HeadOptions::new().with_reduction(HeadReduction::None),
        ),
        ("all, mean", all.clone()),
        ("all, none", all.with_reduction(HeadReduction::None)),
    ]
}

/// (B, I, C, chunk elements): small C; the streamed path at C = 40 in chunks of 5 rows (its
/// materialized route with smoothing); C = 300 in the path's own chunks.
const SHAPES: &[(usize, usize, usize, usize)] =
    &[(37, 12, 10, 0), (61, 20, 40, 200), (70, 24, 300, 0)];

/// The inputs of a shape: every fifth target ignored (-100), one a pad token (1).
fn data(batch: usize, inputs: usize, classes: usize) -> HeadData {
    let mut data = HeadData::random(7 + classes as u64, batch, inputs, classes);
    for r in (2..batch).step_by(5) {
        data.labels[r] = -100;
    }
    data.labels[0] = 1;
    data
}

/// The result, the gradients of `sum(result * 0.75)` and the predictions of one call, as bits.
fn bits<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    options: &HeadOptions,
    dtype: DType,
) -> Vec<u64> {
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, dtype);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let (out, predictions) = fused_linear_cross_entropy_and_predictions(
        x.clone(),
        w.clone(),
        Some(b.clone()),
        labels,
        options,
    );
    let grads = (out.clone() * 0.75).sum().backward();
    let predictions = predictions
        .into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .expect("i64");
    to_f64(out)
        .into_iter()
        .chain(to_f64(x.grad(&grads).expect("dX")))
        .chain(to_f64(w.grad(&grads).expect("dW")))
        .chain(to_f64(b.grad(&grads).expect("db")))
        .map(f64::to_bits)
        .chain(predictions.into_iter().map(|p| p as u64))
        .collect()
}

/// Every case of the matrix on `B`: its name and options.
fn matrix<B: FusedHeadBackend>(device: &B::Device) -> Vec<(String, HeadData, HeadOptions)> {
    let tf32 = <Autodiff<B> as FusedHeadBackend>::head_tf32_available(device);
    let mut cases = Vec::new();
    for &(b, i, c, chunk) in SHAPES {
        let data = data(b, i, c);
        for (name, loss) in loss_options(c) {
            for activation in [HeadActivation::Identity, HeadActivation::Relu] {
                for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
                    if precision == HeadPrecision::Tf32 && (c <= 32 || !tf32) {
                        continue;
                    }
                    let options = loss
                        .clone()
                        .with_activation(activation)
                        .with_precision(precision)
                        .with_chunk_elements((chunk > 0).then_some(chunk));
                    let label = format!("B={b} I={i} C={c} {name} {activation:?} {precision:?}");
                    cases.push((label, data.clone(), options));
                }
            }
        }
    }
    cases
}

/// The matrix's bits on `B`, each case called 8 times and required to agree; one hash of all.
fn matrix_hash<B: FusedHeadBackend>(device: &B::Device) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (label, data, options) in matrix::<B>(device) {
        let first = bits::<B>(device, &data, &options, DType::F32);
        for call in 1..8 {
            assert!(
                bits::<B>(device, &data, &options, DType::F32) == first,
                "{label}: call {call} gave other bits than the first"
            );
        }
        first.hash(&mut h);
    }
    h.finish()
}

/// The paths one thread each runs at once: (name, data, options, dtype).
fn thread_paths(bf16: bool) -> Vec<(&'static str, HeadData, HeadOptions, DType)> {
    let relu = HeadOptions::new().with_activation(HeadActivation::Relu);
    let mut paths = vec![
        ("small C", data(64, 16, 10), relu.clone(), DType::F32),
        (
            "streamed",
            data(96, 32, 50),
            HeadOptions::new().with_chunk_elements(Some(500)),
            DType::F32,
        ),
        (
            "streamed TF32",
            data(80, 24, 70),
            relu.clone().with_precision(HeadPrecision::Tf32),
            DType::F32,
        ),
        (
            "options",
            data(70, 20, 40),
            relu.clone()
                .with_ignore_index(Some(-100))
                .with_class_weights(Some(vec![1.5; 40])),
            DType::F32,
        ),
        (
            "materialized",
            data(50, 12, 60),
            HeadOptions::new().with_smoothing(Some(0.2)),
            DType::F32,
        ),
    ];
    if bf16 {
        let data = data(64, 32, 40).rounded_to(DType::BF16);
        paths.push((
            "bf16 streamed",
            data.clone(),
            HeadOptions::new(),
            DType::BF16,
        ));
        let lean = HeadOptions::new()
            .with_accumulation(HeadAccumulation::Lean)
            .with_chunk_elements(Some(40 * 16));
        paths.push((
            "bf16 streamed lean",
            data.clone(),
            lean.clone(),
            DType::BF16,
        ));
        let rounded = HeadOptions::new().with_logits(HeadLogits::Rounded);
        paths.push((
            "bf16 streamed, rounded logits",
            data.clone(),
            rounded.clone(),
            DType::BF16,
        ));
        paths.push((
            "bf16 streamed lean, rounded logits",
            data,
            lean.with_logits(HeadLogits::Rounded),
            DType::BF16,
        ));
        let data = self::data(64, 16, 12).rounded_to(DType::BF16);
        paths.push(("bf16 small C", data, relu, DType::BF16));
    }
    paths
}

/// Three threads per path, all at once, each calling its path 4 times: every call gives the
/// bits of one thread alone. `memory` reads the bytes in use on the calling thread's stream
/// (`None` where the backend has no pool to read): each thread's is back to its value before
/// its calls once they are done.
fn threads_agree<B: FusedHeadBackend>(
    device: &B::Device,
    bf16: bool,
    memory: fn(&B::Device) -> Option<u64>,
) {
    let paths = thread_paths(bf16);
    let alone: Vec<Vec<u64>> = paths
        .iter()
        .map(|(_, data, options, dtype)| bits::<B>(device, data, options, *dtype))
        .collect();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (k, (name, data, options, dtype)) in paths.iter().enumerate() {
            for copy in 0..3 {
                let device = device.clone();
                let want = &alone[k];
                handles.push(scope.spawn(move || {
                    B::sync(&device).unwrap();
                    let before = memory(&device);
                    for call in 0..4 {
                        let got = bits::<B>(&device, data, options, *dtype);
                        assert!(
                            got == *want,
                            "{name} (thread {copy}, call {call}): other bits"
                        );
                    }
                    B::sync(&device).unwrap();
                    let after = memory(&device);
                    assert_eq!(after, before, "{name} (thread {copy}): bytes in use after");
                }));
            }
        }
        for handle in handles {
            handle.join().expect("a thread failed");
        }
    });
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_mean_is_the_pairwise_tree() {
    mean_is_the_pairwise_tree::<burn::backend::wgpu::WgpuRuntime>(&common::vulkan_device());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_mean_is_the_pairwise_tree() {
    mean_is_the_pairwise_tree::<cubecl::cuda::CudaRuntime>(&Default::default());
}

/// The tests, on one backend `B` (`$memory`: the bytes in use on the calling thread's stream).
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr, $bf16:expr, $memory:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            /// The matrix, 8 calls of each case; then this test binary again, in another
            /// process, must give the same hash.
            #[test]
            fn same_bits_for_every_option_call_and_process() {
                let hash = matrix_hash::<B>(&device());
                if std::env::var("FUSED_HEAD_MATRIX_HASH").is_ok() {
                    println!("\nMATRIX {hash:x}");
                    return;
                }
                let path = module_path!().split_once("::").map_or("", |(_, p)| p);
                let name = format!("{path}::same_bits_for_every_option_call_and_process");
                let out = std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", &name, "--nocapture", "--test-threads=1"])
                    .env("FUSED_HEAD_MATRIX_HASH", "1")
                    .output()
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                let line = stdout
                    .lines()
                    .find(|l| l.starts_with("MATRIX"))
                    .unwrap_or_else(|| panic!("the other process said: {stdout}"));
                assert_eq!(
                    line,
                    format!("MATRIX {hash:x}"),
                    "another process gave other bits"
                );
            }

            #[test]
            fn threads_on_every_path_get_the_bits_of_one_thread() {
                threads_agree::<B>(&device(), $bf16, $memory);
            }
        }
    };
}

on_backend!(
    ndarray,
    burn::backend::NdArray<f32>,
    burn::backend::ndarray::NdArrayDevice::Cpu,
    false,
    |_| None
);
#[cfg(feature = "wgpu")]
on_backend!(
    wgpu_fusion,
    burn::backend::Vulkan,
    common::vulkan_device(),
    false,
    |_| None
);
#[cfg(feature = "wgpu")]
on_backend!(
    wgpu_raw,
    burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>,
    common::vulkan_device(),
    false,
    |device| {
        use cubecl::Runtime;
        let client = burn::backend::wgpu::WgpuRuntime::client(device);
        Some(client.memory_usage().unwrap().bytes_in_use)
    }
);
#[cfg(feature = "cuda")]
on_backend!(
    cuda_fusion,
    burn::backend::Cuda,
    burn::backend::cuda::CudaDevice::default(),
    true,
    |_| None
);
#[cfg(feature = "cuda")]
on_backend!(
    cuda_raw,
    burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>,
    burn::backend::cuda::CudaDevice::default(),
    true,
    |device| {
        use cubecl::Runtime;
        let client = cubecl::cuda::CudaRuntime::client(device);
        Some(client.memory_usage().unwrap().bytes_in_use)
    }
);

/// The mean under loss options is the fixed pairwise tree of the rows' losses over the fixed
/// pairwise tree of their weights, bit for bit, written out on the host: no sum whose order a
/// backend chooses. (Before, it was Burn's `sum`, which on CubeCL autotunes between a chained
/// reduction and cubek's `shared_sum` with atomic adds; this test prints what each of those
/// strategies gives on the same rows, for the record.) The streamed path (C = 300 in chunks)
/// and the materialized one (smoothing), on the raw CubeCL backend of the build.
#[cfg(feature = "cube")]
fn mean_is_the_pairwise_tree<R: burn_cubecl::CubeRuntime>(device: &R::Device) {
    use burn::tensor::{Tensor, TensorPrimitive};
    use burn_cubecl::kernel::reduce::{KernelReduceStrategy, SumStrategy, sum_fallback};
    type B<R> = burn_cubecl::CubeBackend<R, f32, i32, u32>;
    use common::pairwise_tree as tree;
    for (smoothing, chunk) in [(None, Some(1500)), (Some(0.1), None)] {
        let data = data(301, 24, 300);
        let weights: Vec<f32> = (0..300).map(|c| 0.25 + (c % 7) as f32 * 0.3).collect();
        let options = HeadOptions::new()
            .with_ignore_index(Some(-100))
            .with_class_weights(Some(weights.clone()))
            .with_smoothing(smoothing)
            .with_chunk_elements(chunk);
        let run = |options: &HeadOptions| {
            let (x, w, b, labels) = data.tensors::<B<R>>(device, DType::F32);
            burn_fused_head::fused_linear_cross_entropy(x, w, Some(b), labels, options)
        };
        let rows = run(&options.clone().with_reduction(HeadReduction::None)); // [B]
        let mean = run(&options).into_data().to_vec::<f32>().unwrap()[0];
        let losses = rows.clone().into_data().to_vec::<f32>().unwrap();
        let row_weights: Vec<f32> = data
            .labels
            .iter()
            .map(|&y| if y == -100 { 0.0 } else { weights[y as usize] })
            .collect();
        let numerator = tree(losses);
        let want = numerator / tree(row_weights);
        let context = format!("smoothing {smoothing:?}");
        assert_eq!(
            mean.to_bits(),
            want.to_bits(),
            "{context}: {mean} against the tree's {want}"
        );
        // What Burn's own sum gives on the same rows, strategy by strategy.
        let strategies = [
            (
                "chained",
                SumStrategy::Chained(KernelReduceStrategy::Unspecified),
            ),
            ("one shot 1", SumStrategy::OneShot(1)),
            ("one shot 4", SumStrategy::OneShot(4)),
            ("one shot 32", SumStrategy::OneShot(32)),
        ];
        for (name, strategy) in strategies {
            let sum = sum_fallback(rows.clone().into_primitive().tensor(), strategy).unwrap();
            let sum = Tensor::<B<R>, 1>::from_primitive(TensorPrimitive::Float(sum));
            let sum = sum.into_data().to_vec::<f32>().unwrap()[0];
            println!(
                "{context}: Burn's sum ({name}) {:08x}, the tree's {:08x}",
                sum.to_bits(),
                numerator.to_bits()
            );
        }
    }
}
