//! One forward and backward pass of the fused head (the ReLU model) on fixed inputs, every stage's output checked element-wise against an independent f64 reference
//! (stock Burn ops on NdArray) with the gate `|got - ref| <= 2e-5 + 2e-4 |ref|`.
//!
//! cargo run --release --example gates                    # NdArray f32 (stock-op bodies)
//! cargo run --release --example gates --features wgpu    # the kernels on wgpu/Vulkan
//! cargo run --release --example gates --features cuda    # the kernels on CUDA
//!
//! Prints the table (gate, max abs error, verdict) and the mean loss; on the first failing gate
//! it prints the first bad element and exits with failure.

use burn::backend::NdArray;
use burn::tensor::DType;
use burn_fused_head::{HeadActivation, HeadOptions, HeadPrecision};
use burn_fused_head_testing::gates::{FastOutputs, StageOutputs, run_fast_path, run_stages};
use burn_fused_head_testing::reference::HeadData;

/// B, I, C of the pass, and the seed of its pseudo-random inputs.
const BATCH: usize = 64;
const INPUTS: usize = 128;
const CLASSES: usize = 10;
const SEED: u64 = 99;

fn main() {
    let data = HeadData::random(SEED, BATCH, INPUTS, CLASSES);
    let (name, got) = run_under_test(&data);
    let want = {
        let device = Default::default();
        let (x, w, b, labels) = data.tensors::<NdArray<f64>>(&device, DType::F64);
        run_stages(x, w, b, labels, 1.0)
    };

    println!("backend under test: {name}");
    println!("B = {BATCH}, I = {INPUTS}, C = {CLASSES}, seed {SEED}");
    println!("{:<5} {:>12} verdict", "gate", "max abs err");
    for report in got.gates(&want) {
        println!("{report}");
        if !report.passed() {
            println!("FAIL: gate {} failed", report.name);
            std::process::exit(1);
        }
    }
    println!("mean loss {:.6} (reference {:.6})", got.loss, want.loss);

    // The fast path, as the op runs under autodiff: the fused forward and backward kernels.
    let fast = fast_path_under_test(&data);
    println!("fast path (head_forward + head_backward):");
    println!("{:<5} {:>12} verdict", "gate", "max abs err");
    for report in fast.gates(&want) {
        println!("{report}");
        if !report.passed() {
            println!("FAIL: fast-path gate {} failed", report.name);
            std::process::exit(1);
        }
    }
    println!("PASS");
}

/// The ReLU head in exact f32: what the stages compute.
fn relu_exact() -> burn_fused_head::backend::KernelOptions {
    HeadOptions::new()
        .with_activation(HeadActivation::Relu)
        .with_precision(HeadPrecision::Exact)
        .kernels()
}

#[cfg(feature = "cuda")]
fn run_under_test(data: &HeadData) -> (&'static str, StageOutputs) {
    use burn::backend::Cuda;
    let device = burn::backend::cuda::CudaDevice::default();
    let (x, w, b, labels) = data.tensors::<Cuda>(&device, DType::F32);
    (
        "Cuda (CUDA kernels, fusion on), f32",
        run_stages(x, w, b, labels, 1.0),
    )
}

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
fn run_under_test(data: &HeadData) -> (&'static str, StageOutputs) {
    use burn::backend::Vulkan;
    burn_fused_head_testing::vulkan::require_driver();
    let device = burn::backend::wgpu::WgpuDevice::default();
    let (x, w, b, labels) = data.tensors::<Vulkan>(&device, DType::F32);
    (
        "Vulkan (wgpu kernels, fusion on), f32",
        run_stages(x, w, b, labels, 1.0),
    )
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn run_under_test(data: &HeadData) -> (&'static str, StageOutputs) {
    let device = Default::default();
    let (x, w, b, labels) = data.tensors::<NdArray<f32>>(&device, DType::F32);
    (
        "NdArray (stock-op bodies), f32",
        run_stages(x, w, b, labels, 1.0),
    )
}

#[cfg(feature = "cuda")]
fn fast_path_under_test(data: &HeadData) -> FastOutputs {
    let device = burn::backend::cuda::CudaDevice::default();
    let (x, w, b, labels) = data.tensors::<burn::backend::Cuda>(&device, DType::F32);
    run_fast_path(x, w, b, labels, 1.0, relu_exact())
}

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
fn fast_path_under_test(data: &HeadData) -> FastOutputs {
    burn_fused_head_testing::vulkan::require_driver();
    let device = burn::backend::wgpu::WgpuDevice::default();
    let (x, w, b, labels) = data.tensors::<burn::backend::Vulkan>(&device, DType::F32);
    run_fast_path(x, w, b, labels, 1.0, relu_exact())
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn fast_path_under_test(data: &HeadData) -> FastOutputs {
    let device = Default::default();
    let (x, w, b, labels) = data.tensors::<NdArray<f32>>(&device, DType::F32);
    run_fast_path(x, w, b, labels, 1.0, relu_exact())
}
