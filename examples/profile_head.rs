//! A few training steps of the op at one shape, nothing else: the program to put under a
//! profiler (Nsight Compute: `ncu --section SpeedOfLight ...`).
//!
//! cargo run --release --example profile_head --features cuda -- 65536 1024 10 [steps]
//!
//! With `--features cuda` it runs on the raw `CubeBackend<CudaRuntime>` (fusion off, so each
//! kernel launch is the op's own), or with `FUSED_HEAD_PROFILE_FUSION=1` set on the default
//! `Cuda` type (fusion on); without the feature, on NdArray.

use burn::tensor::DType;
use burn::tensor::backend::AutodiffBackend;
use burn_fused_head::reference::HeadData;
use burn_fused_head::{FusedHeadBackend, linear_relu_cross_entropy};

/// `steps` synced training steps of the op on B, I, C from the command line.
fn run<B: AutodiffBackend + FusedHeadBackend>(device: &B::Device) {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("B I C [steps]: integers"))
        .collect();
    let (batch, inputs, classes) = match args[..] {
        [b, i, c, ..] => (b, i, c),
        _ => (64, 128, 10),
    };
    let steps = args.get(3).copied().unwrap_or(1);
    let data = HeadData::random(1, batch, inputs, classes);
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    for _ in 0..steps {
        let loss = linear_relu_cross_entropy(x.clone(), w.clone(), b.clone(), labels.clone());
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        B::sync(device).unwrap();
        drop(kept);
    }
    println!("B = {batch}, I = {inputs}, C = {classes}: {steps} step(s) done");
}

#[cfg(feature = "cuda")]
fn main() {
    use burn::backend::{Autodiff, Cuda};
    use burn_cubecl::CubeBackend;
    use cubecl::cuda::CudaRuntime;
    // FUSED_HEAD_PROFILE_FUSION=1: the default `Cuda` type (fusion on) instead.
    if std::env::var_os("FUSED_HEAD_PROFILE_FUSION").is_some() {
        run::<Autodiff<Cuda>>(&Default::default());
    } else {
        run::<Autodiff<CubeBackend<CudaRuntime, f32, i32, u8>>>(&Default::default());
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    use burn::backend::{Autodiff, NdArray};
    run::<Autodiff<NdArray<f32>>>(&Default::default());
}
