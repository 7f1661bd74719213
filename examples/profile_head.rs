//! A few training steps of the op at one shape, nothing else: the program to put under a
//! profiler (Nsight Compute: `ncu --section SpeedOfLight ...`).
//!
//! cargo run --release --example profile_head --features cuda -- 65536 1024 10 [steps]
//!
//! With `--features cuda` it runs on the raw `CubeBackend<CudaRuntime>` (fusion off, so each
//! kernel launch is the op's own), or with `FUSED_HEAD_PROFILE_FUSION=1` set on the default
//! `Cuda` type (fusion on); without the feature, on NdArray.
//!
//! With `FUSED_HEAD_PROFILE_PHASES=1` it then times `steps` more steps phase by phase (host
//! calls and GPU waits apart) and prints the medians.
//!
//! With `FUSED_HEAD_PROFILE_KEEP_AWAKE=1` (CUDA only, a probe, not a recommendation) a helper
//! thread hands CubeCL's task queue to its server thread every ~10 us, so that thread never
//! reaches its 150 us sleeps: the synced step without the server's wake-up latency. With
//! `FUSED_HEAD_PROFILE_SERVER_WAIT=1` (CUDA only, a probe), each step instead ends with a task
//! that makes the server thread itself wait for the GPU, so it is busy, not asleep, until the
//! step's kernels are done.

use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Int, Tensor};
use burn_fused_head::reference::HeadData;
use burn_fused_head::{FusedHeadBackend, linear_relu_cross_entropy};

/// B, I, C and steps from the command line: (64, 128, 10) and 1 step by default.
fn command_line() -> (usize, usize, usize, usize) {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("B I C [steps]: integers"))
        .collect();
    let (batch, inputs, classes) = match args[..] {
        [b, i, c, ..] => (b, i, c),
        _ => (64, 128, 10),
    };
    (batch, inputs, classes, args.get(3).copied().unwrap_or(1))
}

/// `steps` synced training steps of the op on B, I, C from the command line.
fn run<B: AutodiffBackend + FusedHeadBackend>(device: &B::Device) {
    let (batch, inputs, classes, steps) = command_line();
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
    if std::env::var_os("FUSED_HEAD_PROFILE_PHASES").is_some() {
        phases::<B>(device, &x, &w, &b, &labels, steps);
    }
}

/// Where a step's wall time goes, as medians over `steps` steps (ms): the host returning from
/// the forward call (kernels queued, not waited for), the wait for the GPU after it, the host
/// returning from the backward call, the wait after it; then whole steps with one sync at the
/// end, as the benchmark times them. A host phase as long as its step means the step is
/// host-bound; a wait near the kernels' time means the GPU is.
fn phases<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    x: &Tensor<B, 2>,
    w: &Tensor<B, 2>,
    b: &Tensor<B, 1>,
    labels: &Tensor<B, 1, Int>,
    steps: usize,
) {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut parts: [Vec<f64>; 5] = Default::default();
    for _ in 0..steps.max(1) {
        let t = Instant::now();
        let loss = linear_relu_cross_entropy(x.clone(), w.clone(), b.clone(), labels.clone());
        parts[0].push(ms(t));
        let t = Instant::now();
        B::sync(device).unwrap();
        parts[1].push(ms(t));
        let t = Instant::now();
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        server_waits_for_gpu();
        parts[2].push(ms(t));
        let t = Instant::now();
        B::sync(device).unwrap();
        parts[3].push(ms(t));
        drop(kept);
        let t = Instant::now();
        let loss = linear_relu_cross_entropy(x.clone(), w.clone(), b.clone(), labels.clone());
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        server_waits_for_gpu();
        B::sync(device).unwrap();
        parts[4].push(ms(t));
        drop(kept);
    }
    let [fh, fs, bh, bs, step] = parts.map(median);
    println!(
        "medians (ms): forward host {fh:.4}, forward wait {fs:.4}, backward host {bh:.4}, \
         backward wait {bs:.4}; step (one sync) {step:.4}"
    );
    // Steps back to back, one sync per 20 (a training loop that reads the loss now and then):
    // the time per step once the host runs ahead of the GPU.
    let mut per_step = Vec::new();
    for _ in 0..(steps / 20).max(3) {
        let t = Instant::now();
        let mut kept = Vec::new();
        for _ in 0..20 {
            let loss = linear_relu_cross_entropy(x.clone(), w.clone(), b.clone(), labels.clone());
            let grads = loss.backward();
            kept.push((x.grad(&grads), w.grad(&grads), b.grad(&grads)));
            server_waits_for_gpu();
        }
        B::sync(device).unwrap();
        per_step.push(ms(t) / 20.0);
        drop(kept);
    }
    println!("step, 20 back to back per sync: {:.4} ms", median(per_step));
}

#[cfg(feature = "cuda")]
fn main() {
    use burn::backend::{Autodiff, Cuda};
    use burn_cubecl::CubeBackend;
    use cubecl::cuda::CudaRuntime;
    // FUSED_HEAD_PROFILE_FUSION=1: the default `Cuda` type (fusion on) instead.
    if std::env::var_os("FUSED_HEAD_PROFILE_KEEP_AWAKE").is_some() {
        keep_server_awake();
    }
    if std::env::var_os("FUSED_HEAD_PROFILE_FUSION").is_some() {
        run::<Autodiff<Cuda>>(&Default::default());
    } else {
        run::<Autodiff<CubeBackend<CudaRuntime, f32, i32, u8>>>(&Default::default());
        if std::env::var_os("FUSED_HEAD_PROFILE_PHASES").is_some() {
            device_times();
        }
    }
}

/// A probe of the synced step's wake-up cost: CubeCL 0.10's server thread (one per device) runs
/// queued launches in batches or at a flush, and once idle it spins, yields, then sleeps in
/// steps of 150 us, so the first launch after a sync may wait for the end of a sleep. This
/// detached thread flushes the (usually empty) queue every ~10 us for the life of the process:
/// each flush gives the server 32 no-op tasks, which resets its idle count.
#[cfg(feature = "cuda")]
fn keep_server_awake() {
    use cubecl::device::Device;
    use cubecl::device_handle::DeviceHandle;
    use cubecl::{Runtime, cuda::CudaRuntime};
    let device: <CudaRuntime as Runtime>::Device = Default::default();
    CudaRuntime::client(&device); // the server thread exists before the helper's first flush
    let handle = DeviceHandle::<<CudaRuntime as Runtime>::Server>::new(device.to_id());
    std::thread::spawn(move || {
        loop {
            handle.flush_queue();
            let t = Instant::now();
            while t.elapsed().as_micros() < 10 {
                std::hint::spin_loop();
            }
        }
    });
    println!("keep-awake: the server's queue is flushed every ~10 us");
}

/// With `FUSED_HEAD_PROFILE_SERVER_WAIT=1`: a task for CubeCL's server thread that blocks it
/// until the GPU has run everything queued on the caller's stream, handed over at once (a
/// probe of keeping the server busy through a step's kernels instead of asleep after them).
#[cfg(feature = "cuda")]
fn server_waits_for_gpu() {
    use cubecl::device::Device;
    use cubecl::device_handle::DeviceHandle;
    use cubecl::server::ComputeServer;
    use cubecl::stream_id::StreamId;
    use cubecl::{Runtime, cuda::CudaRuntime};
    if std::env::var_os("FUSED_HEAD_PROFILE_SERVER_WAIT").is_none() {
        return;
    }
    let device: <CudaRuntime as Runtime>::Device = Default::default();
    let handle = DeviceHandle::<<CudaRuntime as Runtime>::Server>::new(device.to_id());
    handle.submit(|server| {
        let _ = cubecl::future::block_on(server.sync(StreamId::current()));
    });
    handle.flush_queue();
}

#[cfg(not(feature = "cuda"))]
fn server_waits_for_gpu() {}

/// The forward's and the backward's time as CubeCL's `profile` measures them (it prints its
/// timing method: on CUDA with CubeCL 0.10 it is `System`, the host's clock from a sync before
/// the work to a sync after it), medians over the steps, raw `CubeBackend` only.
#[cfg(feature = "cuda")]
fn device_times() {
    use burn::backend::Autodiff;
    use burn_cubecl::CubeBackend;
    use cubecl::Runtime;
    use cubecl::cuda::CudaRuntime;
    type B = Autodiff<CubeBackend<CudaRuntime, f32, i32, u8>>;
    let (batch, inputs, classes, steps) = command_line();
    let steps = steps.max(1);
    let device = Default::default();
    let client = CudaRuntime::client(&device);
    let data = HeadData::random(1, batch, inputs, classes);
    let (x, w, b, labels) = data.tensors::<B>(&device, DType::F32);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let ms = |d: cubecl::profile::ProfileDuration| {
        cubecl::future::block_on(d.resolve())
            .duration()
            .as_secs_f64()
            * 1e3
    };
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let (xf, wf, bf, lf) = (x.clone(), w.clone(), b.clone(), labels.clone());
        let (loss, d) = client
            .profile(move || linear_relu_cross_entropy(xf, wf, bf, lf), "forward")
            .unwrap();
        if fwd.is_empty() {
            println!("timing method: {:?}", d.timing_method());
        }
        fwd.push(ms(d));
        let (xb, wb, bb) = (x.clone(), w.clone(), b.clone());
        let (kept, d) = client
            .profile(
                move || {
                    let grads = loss.backward();
                    (xb.grad(&grads), wb.grad(&grads), bb.grad(&grads))
                },
                "backward",
            )
            .unwrap();
        bwd.push(ms(d));
        <B as burn::tensor::backend::Backend>::sync(&device).unwrap();
        drop(kept);
    }
    fwd.sort_by(f64::total_cmp);
    bwd.sort_by(f64::total_cmp);
    println!(
        "CubeCL profile medians (ms): forward {:.4}, backward {:.4}",
        fwd[steps / 2],
        bwd[steps / 2]
    );
}

#[cfg(not(feature = "cuda"))]
fn main() {
    use burn::backend::{Autodiff, NdArray};
    run::<Autodiff<NdArray<f32>>>(&Default::default());
}
