//! Device memory of one training step, phase by phase: bytes in use (live tensors) and bytes
//! the CubeCL pool has reserved (its pages), for our op or Burn's stock head. Two steps, with a
//! pool cleanup after the first, as the benchmark's memory column does.
//!
//!   cargo run --release -p burn-fused-head-testing --features cuda --bin memory -- ours 4096 512 10
//!   cargo run --release -p burn-fused-head-testing --features wgpu --bin memory -- stock 4096 512 10
//!
//! Runs on the raw `CubeBackend` of CUDA with `--features cuda`, else of wgpu (the CPU device
//! over lavapipe without a GPU). Needs `cuda` or `wgpu`.

#[cfg(any(feature = "cuda", feature = "wgpu"))]
fn main() {
    use burn::backend::Autodiff;
    use burn::tensor::DType;
    use burn::tensor::backend::Backend;
    use burn_cubecl::CubeBackend;
    use burn_fused_head::{HeadActivation, HeadOptions, fused_linear_cross_entropy};
    use burn_fused_head_testing::reference::{HeadData, stock_head_loss};
    use cubecl::Runtime;
    #[cfg(feature = "cuda")]
    use cubecl::cuda::{CudaDevice as Device, CudaRuntime as Rt};
    #[cfg(not(feature = "cuda"))]
    use cubecl::wgpu::{WgpuDevice as Device, WgpuRuntime as Rt};
    type B = Autodiff<CubeBackend<Rt, f32, i32, u8>>;

    let args: Vec<String> = std::env::args().collect();
    let usage = "ours|stock B I C";
    let ours = match args.get(1).map(String::as_str) {
        Some("ours") => true,
        Some("stock") => false,
        _ => panic!("{usage}"),
    };
    let n = |i: usize| -> usize { args.get(i).and_then(|a| a.parse().ok()).expect(usage) };
    let data = HeadData::random(1, n(2), n(3), n(4));
    let device = Device::default();
    let client = Rt::client(&device);
    let show = |phase: &str| {
        B::sync(&device).unwrap();
        let u = client.memory_usage().unwrap();
        println!(
            "{phase:>9}: in use {:>12} B, reserved {:>12} B",
            u.bytes_in_use, u.bytes_reserved
        );
    };
    for step in 0..2 {
        let (x, w, b, labels) = data.tensors::<B>(&device, DType::F32);
        let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
        show("inputs");
        let loss = if ours {
            let options = HeadOptions::new().with_activation(HeadActivation::Relu);
            fused_linear_cross_entropy(x.clone(), w.clone(), Some(b.clone()), labels, &options)
        } else {
            stock_head_loss::<B>(x.clone(), w.clone(), b.clone(), labels)
        };
        show("forward");
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        show("backward");
        drop((kept, grads));
        show("dropped");
        if step == 0 {
            client.memory_cleanup();
            show("cleanup");
        }
    }
}

#[cfg(not(any(feature = "cuda", feature = "wgpu")))]
fn main() {
    eprintln!("the memory tool needs --features cuda or --features wgpu");
}
