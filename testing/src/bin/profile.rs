//! A few training steps of the op at one shape, nothing else: the program to put under a
//! profiler (Nsight Compute: `ncu --section SpeedOfLight ...`).
//!
//!   cargo run --release -p burn-fused-head-testing --features cuda --bin profile -- B I C [steps] [--fusion] [--phases]
//!     [--tf32] [--identity] [--bf16] [--chunk ELEMENTS] [--z-loss ZETA] [--softcap CAP]
//!     [--logit-scale S] [--token-stats] [--host-ordered] [--dw-as-stored] [--memory]
//!     [--timeline] [--half-loads K] [--lean] [--rounded] [--dw-answer K] [--host-waits K]
//!
//! With `--features cuda` it runs on the raw `CubeBackend<CudaRuntime>` (fusion off, so each
//! kernel launch is the op's own), or with `--fusion` on the default `Cuda` type (fusion on);
//! without the feature, on NdArray. `--phases` then times `steps` more steps phase by phase
//! (host calls and GPU waits apart) and prints the medians, and on the raw backend the forward's
//! and backward's times as CubeCL's `profile` measures them. `--tf32` and `--identity` set the
//! op's precision and activation (exact and ReLU by default). `--bf16` runs on bf16 tensors
//! (`CubeBackend<CudaRuntime, bf16, ..>`, or `Cuda<bf16>` with `--fusion`). `--chunk N` sets
//! the streamed path's chunk budget to N elements (`HeadOptions::chunk_elements`; the path's
//! rule otherwise). `--z-loss ZETA`, `--softcap CAP` and `--logit-scale S` add the LM terms
//! (`HeadOptions::{z_loss, softcap, logit_scale}`): their cost beside the plain step's.
//! `--token-stats` asks for each row's statistics too
//! (`fused_linear_cross_entropy_with_token_stats`; they are computed and dropped).
//! `--host-ordered` orders cuBLASLt's stream and CubeCL's from the host, per chunk, in place of
//! one GPU timeline (`burn_fused_head::testing::host_ordered`): the two routes side by side.
//! `--dw-as-stored` computes TF32 dW from X as stored, not from its transposed chunk
//! (`burn_fused_head::testing::dw_from_x_as_stored`): the two layouts side by side.
//! `--memory` prints the peak bytes in use over one step at the fullest points of our CubeCL
//! paths (the streamed path's chunks, the small-classes kernels) and what that holds beyond
//! the inputs and the gradients (`burn_fused_head::testing::peak_memory`), or that none was
//! recorded where neither ran. Every run prints its first step's time (the process's first:
//! its kernels compiled, cuBLASLt loaded where it runs; the inputs already on the device).
//! `--timeline` times `steps` more steps on one GPU timeline with CUDA events
//! (`burn_fused_head::testing::timeline`): where the wall time goes between the host and the
//! stream, and each kind of operation's GPU time under sustained load.
//! `--half-loads K` runs the small-C kernels on bf16 or f16 X with K (1, 2 or 4) times the
//! f32 count of X's elements loaded at once (`burn_fused_head::testing::with_half_loads`).
//! `--lean` sums dW in the inputs' type between the streamed path's smaller chunks
//! (`HeadAccumulation::Lean`). `--rounded` rounds bf16's logits to bf16 before the softmax
//! (`HeadLogits::Rounded`). `--dw-answer K` runs the streamed path's dW products on
//! cuBLASLt's heuristic answer K (`burn_fused_head::testing::with_dw_answer`; 0 is the
//! first, the rule before TF32 dW's wide-tile pick), beside the `gemm_sweep` tool's timings of each answer alone.
//! `--host-waits K` runs with the streamed path's wait at exit moved
//! (`burn_fused_head::testing::with_host_waits`, K one of: 1 on this thread at every size, the route
//! before 2026-12-07's fourth session; 2 on CubeCL's server thread at every size; 0 the
//! path's rule, the server thread for small steps only).

use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Int, Tensor};
use burn_fused_head::{
    FusedHeadBackend, HeadAccumulation, HeadActivation, HeadLogits, HeadOptions, HeadPrecision,
    fused_linear_cross_entropy, fused_linear_cross_entropy_with_token_stats,
};
use burn_fused_head_testing::reference::HeadData;

/// Whether `--flag` is on the command line.
fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// The value after `--flag` on the command line, if any.
fn value_of(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

/// The value after `--chunk`, if any.
fn chunk_elements() -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--chunk")?;
    Some(args[at + 1].parse().expect("--chunk ELEMENTS: an integer"))
}

/// The op with the options of the command line.
fn head<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let mut options = HeadOptions::new()
        .with_activation(HeadActivation::Relu)
        .with_chunk_elements(chunk_elements());
    if flag("--lean") {
        options = options.with_accumulation(HeadAccumulation::Lean);
    }
    if flag("--rounded") {
        options = options.with_logits(HeadLogits::Rounded);
    }
    if flag("--tf32") {
        options = options.with_precision(HeadPrecision::Tf32);
    }
    if flag("--identity") {
        options = options.with_activation(HeadActivation::Identity);
    }
    if let Some(zeta) = value_of("--z-loss") {
        options = options.with_z_loss(Some(zeta.parse().expect("--z-loss ZETA: a number")));
    }
    if let Some(cap) = value_of("--softcap") {
        options = options.with_softcap(Some(cap.parse().expect("--softcap CAP: a number")));
    }
    if let Some(s) = value_of("--logit-scale") {
        options = options.with_logit_scale(Some(s.parse().expect("--logit-scale S: a number")));
    }
    if flag("--token-stats") {
        let (loss, _stats) =
            fused_linear_cross_entropy_with_token_stats(x, w, Some(b), labels, &options);
        return loss;
    }
    fused_linear_cross_entropy(x, w, Some(b), labels, &options)
}

/// The flags that take a value.
const VALUED: [&str; 7] = [
    "--chunk",
    "--dw-answer",
    "--host-waits",
    "--z-loss",
    "--softcap",
    "--logit-scale",
    "--half-loads",
];

/// B, I, C and steps from the command line: (64, 128, 10) and 1 step by default.
fn command_line() -> (usize, usize, usize, usize) {
    let all: Vec<String> = std::env::args().collect();
    let args: Vec<usize> = all
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(k, a)| !a.starts_with("--") && !VALUED.contains(&all[k - 1].as_str()))
        .map(|(_, a)| a)
        .map(|a| {
            a.parse()
                .expect("B I C [steps] [--fusion] [--phases]: integers")
        })
        .collect();
    let (batch, inputs, classes) = match args[..] {
        [b, i, c, ..] => (b, i, c),
        _ => (64, 128, 10),
    };
    (batch, inputs, classes, args.get(3).copied().unwrap_or(1))
}

/// `steps` synced training steps of the op on B, I, C from the command line.
fn run<B: AutodiffBackend + FusedHeadBackend>(device: &B::Device) {
    let waits = || match value_of("--host-waits") {
        Some(k) => {
            let k = k.parse().expect("--host-waits K: a whole number");
            burn_fused_head::testing::with_host_waits(k, || steps::<B>(device))
        }
        None => steps::<B>(device),
    };
    let answer = || match value_of("--dw-answer") {
        Some(k) => {
            let k = k.parse().expect("--dw-answer K: a whole number");
            burn_fused_head::testing::with_dw_answer(k, waits)
        }
        None => waits(),
    };
    let layout = || {
        if flag("--dw-as-stored") {
            burn_fused_head::testing::dw_from_x_as_stored(answer)
        } else {
            answer()
        }
    };
    let route = || {
        if flag("--host-ordered") {
            burn_fused_head::testing::host_ordered(layout)
        } else {
            layout()
        }
    };
    match value_of("--half-loads") {
        Some(k) => {
            let k = k.parse().expect("--half-loads K: 1, 2 or 4");
            burn_fused_head::testing::with_half_loads(k, route)
        }
        None => route(),
    }
}

/// The float dtype of `B`'s tensors here: its float element's.
fn float_dtype<B: burn::tensor::backend::Backend>() -> DType {
    <B::FloatElem as burn::tensor::Element>::dtype()
}

fn steps<B: AutodiffBackend + FusedHeadBackend>(device: &B::Device) {
    let (batch, inputs, classes, steps) = command_line();
    let data = HeadData::random(1, batch, inputs, classes);
    let (x, w, b, labels) = data.tensors::<B>(device, float_dtype::<B>());
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    // The inputs on the device: the CUDA context exists before the first step is timed.
    B::sync(device).unwrap();
    let mut first = None;
    for _ in 0..steps {
        let start = Instant::now();
        let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        B::sync(device).unwrap();
        first.get_or_insert(start.elapsed());
        drop(kept);
    }
    println!(
        "B = {batch}, I = {inputs}, C = {classes}, {:?}: {steps} step(s) done",
        float_dtype::<B>()
    );
    if let Some(first) = first {
        println!(
            "first step of the process (its kernels compiled, inputs on the device): {:.1} ms",
            first.as_secs_f64() * 1e3
        );
    }
    if flag("--memory") {
        let ((), peak) = burn_fused_head::testing::peak_memory(|| {
            let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
            let grads = loss.backward();
            let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
            B::sync(device).unwrap();
            drop(kept);
        });
        if peak == 0 {
            // `peak_memory` reads our CubeCL paths' fullest points only.
            println!("memory: not recorded (no streamed or small-classes kernel ran)");
        } else {
            // X, W, b and their gradients in the float dtype, and the labels.
            let floats = (batch * inputs + classes * inputs + classes) * float_dtype::<B>().size();
            let labels_bytes = batch * <B::IntElem as burn::tensor::Element>::dtype().size();
            let mib = |bytes: f64| bytes / (1 << 20) as f64;
            println!(
                "memory: peak in use {:.1} MiB, beyond inputs and gradients {:.1} MiB",
                mib(peak as f64),
                mib(peak as f64 - (2 * floats + labels_bytes) as f64)
            );
        }
    }
    if flag("--phases") {
        phases::<B>(device, &x, &w, &b, &labels, steps);
    }
    if flag("--timeline") {
        timeline::<B>(device, &x, &w, &b, &labels, steps);
    }
}

/// Medians over `steps` steps (ms) of a step's wall time cut at the streamed path's instants
/// (`burn_fused_head::testing::Timeline`): from the call to the path, its buffers, the chunks'
/// setup and entry wait, queueing, the exit wait, the loss's reduction, and from the path's return to the end
/// of the sync; then the stream's time by
/// kind of operation and in all (CUDA events), and the wall less that (the time outside the
/// stream: the host, CubeCL's kernels before and after it).
fn timeline<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    x: &Tensor<B, 2>,
    w: &Tensor<B, 2>,
    b: &Tensor<B, 1>,
    labels: &Tensor<B, 1, Int>,
    steps: usize,
) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut host: [Vec<f64>; 8] = Default::default();
    let mut kinds: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut chain = Vec::new();
    for _ in 0..steps.max(1) {
        let ((t0, t1), traced) = burn_fused_head::testing::timeline(|| {
            let t0 = Instant::now();
            let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
            let grads = loss.backward();
            let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
            B::sync(device).unwrap();
            let t1 = Instant::now();
            drop(kept);
            (t0, t1)
        });
        let [step] = &traced[..] else {
            println!(
                "timeline: {} traced step(s) in one step, not one",
                traced.len()
            );
            return;
        };
        let cuts = [
            t0,
            step.called,
            step.entered,
            step.waited,
            step.queued,
            step.synced,
            step.returned,
            t1,
        ];
        for k in 0..7 {
            host[k].push(ms(cuts[k + 1] - cuts[k]));
        }
        host[7].push(ms(t1 - t0));
        let mut total = 0.0;
        let mut mine: Vec<(&'static str, f64)> = Vec::new();
        for &(label, t) in &step.gpu {
            total += t;
            match mine.iter_mut().find(|(l, _)| *l == label) {
                Some((_, sum)) => *sum += t,
                None => mine.push((label, t)),
            }
        }
        chain.push(total);
        for (label, t) in mine {
            match kinds.iter_mut().find(|(l, _)| *l == label) {
                Some((_, v)) => v.push(t),
                None => kinds.push((label, vec![t])),
            }
        }
    }
    let [before, buffers, entry, queue, exit, loss, after, wall] = host.map(median);
    let chain = median(chain);
    println!(
        "timeline medians (ms): to the path {before:.4}, buffers {buffers:.4}, entry wait \
         (with the chunks' setup) {entry:.4}, queueing {queue:.4}, exit wait {exit:.4}, loss {loss:.4}, after {after:.4}; \
         wall {wall:.4}; stream {chain:.4}, wall less stream {:.4}",
        wall - chain
    );
    let kinds: Vec<String> = kinds
        .into_iter()
        .filter(|(label, _)| *label != "start")
        .map(|(label, v)| format!("{label} {:.4}", median(v)))
        .collect();
    println!("timeline stream by operation (ms): {}", kinds.join(", "));
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
        let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
        parts[0].push(ms(t));
        let t = Instant::now();
        B::sync(device).unwrap();
        parts[1].push(ms(t));
        let t = Instant::now();
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        parts[2].push(ms(t));
        let t = Instant::now();
        B::sync(device).unwrap();
        parts[3].push(ms(t));
        drop(kept);
        let t = Instant::now();
        let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
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
            let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
            let grads = loss.backward();
            kept.push((x.grad(&grads), w.grad(&grads), b.grad(&grads)));
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
    use burn::tensor::bf16;
    use burn_cubecl::CubeBackend;
    use cubecl::cuda::CudaRuntime;
    if flag("--bf16") {
        if flag("--fusion") {
            run::<Autodiff<Cuda<bf16>>>(&Default::default());
        } else {
            run::<Autodiff<CubeBackend<CudaRuntime, bf16, i32, u8>>>(&Default::default());
        }
    } else if flag("--fusion") {
        run::<Autodiff<Cuda>>(&Default::default());
    } else {
        run::<Autodiff<CubeBackend<CudaRuntime, f32, i32, u8>>>(&Default::default());
        if flag("--phases") {
            device_times();
        }
    }
}

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
            .profile(move || head(xf, wf, bf, lf), "forward")
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
