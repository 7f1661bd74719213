//! The fused head against Burn's stock head, side by side in one process, interleaved per shape.
//!
//! cargo bench --bench head                    # NdArray, small shapes (any machine)
//! cargo bench --bench head --features cuda    # the CUDA contenders, every shape
//!
//! The one benchmark harness of the crate. Rows are named by shape (`b65536_i1024_c10`).
//!
//! Per shape and contender: first-call latency (kernel compilation, Burn's autotune), then the
//! steady state after warm-up: the full training step (forward + backward to X, W, b, synced),
//! the forward alone and the backward alone, as median and p20/p80 over many steps; on CUDA the
//! peak memory of a step, measured in a fresh process per contender (the bytes CubeCL's pool
//! holds after a warm-up step, a cleanup and one more step: the pool's high-water mark, in its
//! pages, inputs included); and the napkin-math floor of the step on the H200.
//! Prints one markdown table. Same inputs for every contender.
//!
//! CUDA contenders: our op and Burn's stock head, each on the default `Cuda` type (fusion on)
//! and on the raw `CubeBackend` (fusion off), plus our op with `HeadPrecision::Tf32` on both
//! where C > 32 (its floor counts the GEMMs at the TF32 tensor-core rate), and our op with
//! `HeadActivation::Identity` (exact, and TF32 where C > 32) on the raw `CubeBackend`: the head
//! without the ReLU, as Liger's and CCE's compute it; and our op on bf16 tensors (`Cuda<bf16>`
//! with the ReLU, and the identity on the raw `CubeBackend`; their floor counts the GEMMs at
//! the BF16 rate and their floats as 2 bytes).
//!
//! Partial runs: `--ours-only` (our CUDA contenders, with their memory; stock Burn's autotune
//! takes 1 to 2 minutes per shape and process), `--tf32-only` (our TF32 contenders, no memory
//! column, a quick look while tuning), `--bf16-only` (likewise, the bf16 contenders) and
//! `--shape B,I,C` (repeatable: those shapes only). A memory figure that could not be measured
//! says why in its cell.
//! `--logits`: the head's output alone (the module's `forward`, exact and TF32) against stage 1's
//! kernel and stock Burn, on the raw `CubeBackend`, instead of the training step (with
//! `--ours-only`: our two contenders alone, a quick look).

use std::time::{Duration, Instant};

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Int, Tensor};
#[cfg(feature = "cuda")]
use burn_fused_head::HeadPrecision;
use burn_fused_head::{FusedHeadBackend, HeadActivation, HeadOptions};
use burn_fused_head_testing::reference::{HeadData, stock_head_loss};

/// Time spent on each of the step, forward and backward measures of one contender and shape.
const BUDGET_MS: u64 = 300;
/// Samples of each timing at the least, where they fit in [`MIN_SAMPLES_WITHIN`]: the budget
/// alone gave 3 steps at (8192, 4096, 128256), too few for a median.
const MIN_SAMPLES: usize = 10;
/// How long [`MIN_SAMPLES`] may take before fewer are kept.
const MIN_SAMPLES_WITHIN: Duration = Duration::from_secs(8);

/// H200 floors: device copy bandwidth (read + write counted) and f32 FMA throughput.
const COPY_BYTES_PER_S: f64 = 4.3e12;
const F32_FLOPS: f64 = 67e12;
/// The H200's dense TF32 tensor-core rate (FLOP/s), the floor of the TF32 rows.
const TF32_FLOPS: f64 = 494e12;
/// The H200's dense BF16 tensor-core rate (FLOP/s), the floor of the bf16 rows.
const BF16_FLOPS: f64 = 989e12;

type Head<B> = fn(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1, Int>) -> Tensor<B, 1>;

struct Row {
    shape: (usize, usize, usize),
    contender: String,
    first_ms: f64,
    step: Stats,
    fwd: Stats,
    bwd: Stats,
    /// Memory of one step, or why it was not measured.
    memory: Result<Memory, String>,
}

#[derive(Clone, Copy)]
struct Stats {
    median: f64,
    p20: f64,
    p80: f64,
}

fn stats(mut ms: Vec<f64>) -> Stats {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Stats {
        median: at(0.5),
        p20: at(0.2),
        p80: at(0.8),
    }
}

/// Times `f` (which must sync) until `budget` is spent: at least once, [`MIN_SAMPLES`] times
/// unless that takes [`MIN_SAMPLES_WITHIN`], at most `max` times.
fn repeat(budget: Duration, max: usize, mut f: impl FnMut() -> f64) -> Vec<f64> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.is_empty()
        || (out.len() < MIN_SAMPLES && start.elapsed() < MIN_SAMPLES_WITHIN)
        || (out.len() < max && start.elapsed() < budget)
    {
        out.push(f());
    }
    out
}

fn bench<B: AutodiffBackend + FusedHeadBackend>(
    contender: &str,
    device: &B::Device,
    data: &HeadData,
    head: Head<B>,
    memory: &dyn Fn(bool) -> Result<Memory, String>,
) -> Row {
    let (x, w, b, labels) = data.tensors::<B>(device, float_dtype::<B>());
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let sync = || B::sync(device).unwrap();
    let step = || {
        let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        sync();
        drop(kept);
    };
    sync();
    let _ = memory(true); // clean the pool
    let t = Instant::now();
    step();
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let memory = memory(false);
    let warmups = if first_ms > 1000.0 { 1 } else { 3 };
    for _ in 0..warmups {
        step();
    }
    let budget = Duration::from_millis(BUDGET_MS);
    let step_ms = repeat(budget, 200, || {
        let t = Instant::now();
        step();
        t.elapsed().as_secs_f64() * 1e3
    });
    let fwd_ms = repeat(budget, 200, || {
        let t = Instant::now();
        let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
        sync();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        drop(loss);
        ms
    });
    let bwd_ms = repeat(budget, 200, || {
        let loss = head(x.clone(), w.clone(), b.clone(), labels.clone());
        sync();
        let t = Instant::now();
        let grads = loss.backward();
        let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
        sync();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        drop(kept);
        ms
    });
    Row {
        shape: (data.batch, data.inputs, data.classes),
        contender: contender.to_string(),
        first_ms,
        step: stats(step_ms),
        fwd: stats(fwd_ms),
        bwd: stats(bwd_ms),
        memory,
    }
}

/// The float dtype of backend `B`'s tensors here: its float element's (f32, or bf16 for the
/// bf16 contenders).
fn float_dtype<B: burn::tensor::backend::Backend>() -> DType {
    <B::FloatElem as burn::tensor::Element>::dtype()
}

/// The floor of one step: bytes that must move (read X, W, b, labels; write dX, dW, db) at copy
/// bandwidth, or the three GEMMs (6 B I C FLOPs) at f32 FMA rate, whichever is longer. In ms.
/// TF32 rows take the GEMMs at the TF32 tensor-core rate, bf16 rows at the BF16 rate (and
/// their floats are 2 bytes).
fn floor_ms(shape: (usize, usize, usize), contender: &str) -> f64 {
    let (b, i, c) = shape;
    let flops = 6.0 * (b * i * c) as f64;
    let rate = if contender.contains("TF32") {
        TF32_FLOPS
    } else if contender.contains("bf16") {
        BF16_FLOPS
    } else {
        F32_FLOPS
    };
    (held_bytes(shape, contender) / COPY_BYTES_PER_S).max(flops / rate) * 1e3
}

/// The shape's name in every row: `b65536_i1024_c10`.
/// Bytes of the inputs and the gradients of a step (floats of 4 bytes, 2 for the bf16
/// contenders; labels as i32): what every contender must hold, left out of the extra memory.
fn held_bytes((b, i, c): (usize, usize, usize), contender: &str) -> f64 {
    let float = if contender.contains("bf16") { 2.0 } else { 4.0 };
    float * 2.0 * ((b * i) as f64 + (c * i) as f64 + c as f64) + 4.0 * b as f64
}

fn shape_name((b, i, c): (usize, usize, usize)) -> String {
    format!("b{b}_i{i}_c{c}")
}

fn print_header(device_name: &str) {
    println!(
        "\nDevice: {device_name}. Times in ms (median, p20/p80). `vs stock` = stock step median / this step median on the same backend (> 1: faster than stock)."
    );
    println!(
        "Memory, in MiB beyond the inputs and the gradients (X, W, b, labels, dX, dW, db), as PyTorch's peak extra memory counts them: `live` = the most bytes CubeCL's pool had in use at our paths' fullest points (the streamed path's chunks at C > 32, the small-classes kernels at C <= 32 on CubeCL; every live allocation counted), `pool` = the bytes the pool holds after a step (its high-water mark, in whole pages), the pool's total in brackets. Our rows at C > 32 add the 32 MiB cuBLASLt workspace, allocated outside the pool, to both."
    );
    println!(
        "| shape | contender | first call | step | step p20/p80 | fwd | bwd | vs stock | live / pool extra MiB [pool] | floor | % of floor |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
}

/// The rows of one shape (the stock rows give the ratio), printed as soon as the shape is done,
/// so that a run cut short still reports every finished shape.
fn print_rows(rows: &[Row], on_h200: bool) {
    for row in rows {
        let backend = row.contender.split(' ').next_back().unwrap_or("");
        let stock = rows
            .iter()
            .find(|r| {
                r.shape == row.shape
                    && r.contender.starts_with("stock")
                    && r.contender.ends_with(backend)
            })
            .map(|r| r.step.median);
        let floor = floor_ms(row.shape, &row.contender);
        let (floor_s, pct) = if on_h200 {
            (
                format!("{floor:.4}"),
                format!("{:.1}%", 100.0 * floor / row.step.median),
            )
        } else {
            ("-".to_string(), "-".to_string())
        };
        println!(
            "| {} | {} | {:.1} | {:.3} | {:.3}/{:.3} | {:.3} | {:.3} | {} | {} | {floor_s} | {pct} |",
            shape_name(row.shape),
            row.contender,
            row.first_ms,
            row.step.median,
            row.step.p20,
            row.step.p80,
            row.fwd.median,
            row.bwd.median,
            match stock {
                _ if row.contender.contains("identity") => {
                    "not compared: the stock rows are the ReLU head".to_string()
                }
                Some(s) => format!("{:.2}x", s / row.step.median),
                None => "not measured: no stock row in this run".to_string(),
            },
            match &row.memory {
                Ok(m) => {
                    let mib = |bytes: f64| bytes / (1 << 20) as f64;
                    let workspace = if row.contender.starts_with("ours") && row.shape.2 > 32 {
                        (32u64 << 20) as f64
                    } else {
                        0.0
                    };
                    let held = held_bytes(row.shape, &row.contender);
                    let extra = |bytes: u64| mib(bytes as f64 + workspace - held);
                    let live = match m.live {
                        0 => "-".to_string(),
                        bytes => format!("{:.1}", extra(bytes)),
                    };
                    format!(
                        "{live} / {:.1} [{:.1}]",
                        extra(m.reserved),
                        mib(m.reserved as f64)
                    )
                }
                Err(why) => format!("not measured: {why}"),
            },
        );
    }
}

/// The CUDA contenders, in the order of their rows; the TF32 ones (our op with
/// `HeadPrecision::Tf32`) run where C > 32 only (below, the op runs exact whatever the
/// precision).
#[cfg(feature = "cuda")]
const CUDA_CONTENDERS: [&str; 10] = [
    "ours Cuda",
    "stock Cuda",
    "ours CubeBackend",
    "stock CubeBackend",
    "ours TF32 Cuda",
    "ours TF32 CubeBackend",
    "ours identity CubeBackend",
    "ours TF32 identity CubeBackend",
    "ours bf16 Cuda",
    "ours bf16 identity CubeBackend",
];

/// Our op with `HeadPrecision::Tf32` where `TF32`, and `HeadActivation::Identity` (no ReLU:
/// what Liger's and CCE's heads compute) where `IDENTITY`.
#[cfg(feature = "cuda")]
fn head_with<B: FusedHeadBackend, const TF32: bool, const IDENTITY: bool>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let mut options = HeadOptions::new().with_activation(HeadActivation::Relu);
    if TF32 {
        options = options.with_precision(HeadPrecision::Tf32);
    }
    if IDENTITY {
        options = options.with_activation(HeadActivation::Identity);
    }
    burn_fused_head::fused_linear_cross_entropy(x, w, Some(b), labels, &options)
}

/// The ReLU head's mean loss in exact f32 (the fused op as the benchmark's rows name it
/// "ours").
fn relu_head<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let options = HeadOptions::new().with_activation(HeadActivation::Relu);
    burn_fused_head::fused_linear_cross_entropy(x, w, Some(b), labels, &options)
}

/// The ReLU head's logits in `precision`: the module's `forward` on a head made from W and b.
#[cfg(feature = "cuda")]
fn relu_logits<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    precision: HeadPrecision,
) -> Tensor<B, 2> {
    use burn::module::Param;
    let head = burn_fused_head::FusedLinearCrossEntropy {
        weight: Param::from_tensor(w),
        bias: Some(Param::from_tensor(b)),
        options: HeadOptions::new()
            .with_activation(HeadActivation::Relu)
            .with_precision(precision),
    };
    head.forward(x)
}

/// What [`cuda_contender`] measured.
#[cfg(feature = "cuda")]
enum Measured {
    Row(Row),
    Memory(Memory),
}

/// The memory of one step: the pool's reservation after it, and the most bytes in use seen at
/// the streamed path's fullest points (0 where that path did not run).
struct Memory {
    reserved: u64,
    live: u64,
}

/// Runs CUDA contender `which` on `data`: its full row, or (`memory_only`) one warm-up step, a
/// pool cleanup and one more step, returning the bytes CubeCL's pool then holds.
#[cfg(feature = "cuda")]
fn cuda_contender(which: usize, data: &HeadData, memory_only: bool) -> Measured {
    use burn::backend::{Autodiff, Cuda};
    use burn::tensor::bf16;
    use burn_cubecl::CubeBackend;
    use cubecl::Runtime;
    use cubecl::cuda::CudaRuntime;
    type Fused = Autodiff<Cuda>;
    type Raw = Autodiff<CubeBackend<CudaRuntime, f32, i32, u8>>;
    type FusedBf16 = Autodiff<Cuda<bf16>>;
    type RawBf16 = Autodiff<CubeBackend<CudaRuntime, bf16, i32, u8>>;
    let device = burn::backend::cuda::CudaDevice::default();
    let name = CUDA_CONTENDERS[which];
    if memory_only {
        let client = CudaRuntime::client(&device);
        let step_then_reserved = |step: &dyn Fn()| {
            step();
            client.memory_cleanup();
            let ((), live) = burn_fused_head_testing::peak_memory(step);
            let reserved = client.memory_usage().unwrap().bytes_reserved;
            Memory { reserved, live }
        };
        return Measured::Memory(match which {
            0 => step_then_reserved(&|| one_step::<Fused>(&device, data, relu_head)),
            1 => step_then_reserved(&|| one_step::<Fused>(&device, data, stock_head_loss)),
            2 => step_then_reserved(&|| one_step::<Raw>(&device, data, relu_head)),
            3 => step_then_reserved(&|| one_step::<Raw>(&device, data, stock_head_loss)),
            4 => step_then_reserved(&|| {
                one_step::<Fused>(&device, data, head_with::<_, true, false>)
            }),
            5 => {
                step_then_reserved(&|| one_step::<Raw>(&device, data, head_with::<_, true, false>))
            }
            6 => {
                step_then_reserved(&|| one_step::<Raw>(&device, data, head_with::<_, false, true>))
            }
            8 => step_then_reserved(&|| one_step::<FusedBf16>(&device, data, relu_head)),
            9 => step_then_reserved(&|| {
                one_step::<RawBf16>(&device, data, head_with::<_, false, true>)
            }),
            _ => step_then_reserved(&|| one_step::<Raw>(&device, data, head_with::<_, true, true>)),
        });
    }
    let none = &|_| Err("timing run".to_string());
    Measured::Row(match which {
        0 => bench::<Fused>(name, &device, data, relu_head, none),
        1 => bench::<Fused>(name, &device, data, stock_head_loss, none),
        2 => bench::<Raw>(name, &device, data, relu_head, none),
        3 => bench::<Raw>(name, &device, data, stock_head_loss, none),
        4 => bench::<Fused>(name, &device, data, head_with::<_, true, false>, none),
        5 => bench::<Raw>(name, &device, data, head_with::<_, true, false>, none),
        6 => bench::<Raw>(name, &device, data, head_with::<_, false, true>, none),
        8 => bench::<FusedBf16>(name, &device, data, relu_head, none),
        9 => bench::<RawBf16>(name, &device, data, head_with::<_, false, true>, none),
        _ => bench::<Raw>(name, &device, data, head_with::<_, true, true>, none),
    })
}

/// One synced training step on fresh copies of the inputs (the memory measure).
#[cfg(feature = "cuda")]
fn one_step<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    head: Head<B>,
) {
    let (x, w, b, labels) = data.tensors::<B>(device, float_dtype::<B>());
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let loss = head(x.clone(), w.clone(), b.clone(), labels);
    let grads = loss.backward();
    let kept = (x.grad(&grads), w.grad(&grads), b.grad(&grads));
    B::sync(device).unwrap();
    drop(kept);
}

/// The peak-memory measure of one contender, in a fresh process (this executable with
/// `--memory`), so that no other contender's pages are in its pool; or why it failed (also
/// printed to stderr in full).
#[cfg(feature = "cuda")]
fn memory_in_fresh_process(
    which: usize,
    (b, i, c): (usize, usize, usize),
) -> Result<Memory, String> {
    let exe = std::env::current_exe().map_err(|e| format!("no path to this executable: {e}"))?;
    let out = std::process::Command::new(exe)
        .args([
            "--memory",
            &which.to_string(),
            &b.to_string(),
            &i.to_string(),
            &c.to_string(),
        ])
        .output()
        .map_err(|e| format!("could not start the measuring process: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let measured = text
        .lines()
        .find_map(|l| l.strip_prefix("MEMORY "))
        .map(|v| {
            let n: Vec<Result<u64, _>> = v.split_whitespace().map(str::parse::<u64>).collect();
            match n[..] {
                [Ok(reserved), Ok(live)] => Ok(Memory { reserved, live }),
                _ => Err(()),
            }
        });
    match measured {
        Some(Ok(memory)) => Ok(memory),
        _ => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprintln!(
                "memory measure of {} failed ({}): {stderr}",
                CUDA_CONTENDERS[which], out.status
            );
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            Err(format!("{}; {}", out.status, last.replace('|', "/")))
        }
    }
}

/// `--logits`: the head's output H alone (prediction, no autodiff) on the raw `CubeBackend`,
/// one process, side by side per shape: stage 1's kernel, the module's `forward` (ReLU) exact
/// and TF32, and stock Burn (`relu(x W^T + b)`).
#[cfg(feature = "cuda")]
fn logits_rows(shapes: &[(usize, usize, usize)], ours_only: bool) {
    use burn::tensor::TensorPrimitive;
    use burn::tensor::backend::Backend;
    use burn_cubecl::CubeBackend;
    use cubecl::cuda::CudaRuntime;
    type B = CubeBackend<CudaRuntime, f32, i32, u8>;
    type Logits = fn(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>) -> Tensor<B, 2>;
    let stage1: Logits = |x, w, b| {
        let (_z, h) = B::head_linear_relu_forward(
            x.into_primitive().tensor(),
            w.into_primitive().tensor(),
            b.into_primitive().tensor(),
        );
        Tensor::from_primitive(TensorPrimitive::Float(h))
    };
    let exact: Logits = |x, w, b| relu_logits(x, w, b, HeadPrecision::Exact);
    let tf32: Logits = |x, w, b| relu_logits(x, w, b, HeadPrecision::Tf32);
    let stock: Logits =
        |x, w, b| burn::tensor::activation::relu(x.matmul(w.transpose()) + b.unsqueeze_dim(0));
    let contenders: [(&str, Logits); 4] = [
        ("stock", stock),
        ("stage 1 kernel", stage1),
        ("ours logits", exact),
        ("ours logits TF32", tf32),
    ];
    let device = Default::default();
    println!(
        "\nLogits alone, raw CubeBackend (fusion off), f32. Times in ms; `vs stock` = stock median / this median."
    );
    println!("| shape | contender | first call | median | p20/p80 | vs stock |");
    println!("|---|---|---:|---:|---:|---:|");
    for &(b, i, c) in shapes {
        let data = HeadData::random(1, b, i, c);
        let (x, w, bias, _) = data.tensors::<B>(&device, DType::F32);
        let mut stock_ms = None;
        for (name, f) in contenders {
            if ours_only && !name.starts_with("ours") {
                continue;
            }
            let call = || {
                let t = Instant::now();
                let h = f(x.clone(), w.clone(), bias.clone());
                B::sync(&device).unwrap();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                drop(h);
                ms
            };
            let first = call();
            let s = stats(repeat(Duration::from_millis(BUDGET_MS), 200, call));
            if name == "stock" {
                stock_ms = Some(s.median);
            }
            let vs_stock =
                stock_ms.map_or("-".to_string(), |stock| format!("{:.2}x", stock / s.median));
            println!(
                "| {} | {name} | {first:.1} | {:.3} | {:.3}/{:.3} | {vs_stock} |",
                shape_name((b, i, c)),
                s.median,
                s.p20,
                s.p80
            );
        }
    }
}

#[cfg(feature = "cuda")]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(k) = args.iter().position(|a| a == "--memory") {
        let n = |j: usize| args[k + j].parse::<usize>().expect("--memory WHICH B I C");
        let data = HeadData::random(1, n(2), n(3), n(4));
        if let Measured::Memory(m) = cuda_contender(n(1), &data, true) {
            println!("MEMORY {} {}", m.reserved, m.live);
        }
        return;
    }
    // The largest shape last: the run reports every other shape even if it is cut short there.
    let mut shapes = vec![(64, 128, 10), (4096, 512, 10), (65536, 1024, 10)];
    shapes.extend([1024, 16384].map(|b| (b, 1024, 10)));
    shapes.extend([10, 100, 1000, 8000].map(|c| (8192, 1024, c)));
    shapes.push((8192, 4096, 32000));
    shapes.push((8192, 4096, 128256));
    // `--shape B,I,C` (repeatable): those shapes only, in that order (a quick look while
    // tuning, or the full list split over several runs).
    let picked: Vec<(usize, usize, usize)> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| *a == "--shape")
        .map(|(k, _)| {
            let v: Vec<usize> = args[k + 1]
                .split(',')
                .map(|n| n.parse().expect("--shape B,I,C"))
                .collect();
            (v[0], v[1], v[2])
        })
        .collect();
    if !picked.is_empty() {
        shapes = picked;
    }
    if args.iter().any(|a| a == "--logits") {
        logits_rows(&shapes, args.iter().any(|a| a == "--ours-only"));
        return;
    }
    // `--ours-only`: our contenders alone (no stock ratio); `--tf32-only`: a quick look while
    // tuning (no memory).
    let ours_only = args.iter().any(|a| a == "--ours-only");
    let tf32_only = args.iter().any(|a| a == "--tf32-only");
    let bf16_only = args.iter().any(|a| a == "--bf16-only");
    print_header("CUDA device 0 (Cuda = Fusion<CubeBackend>, CubeBackend = fusion off), f32");
    for shape in shapes {
        let data = HeadData::random(1, shape.0, shape.1, shape.2);
        eprintln!("shape {shape:?}");
        let rows: Vec<Row> = (0..CUDA_CONTENDERS.len())
            .filter(|&which| !ours_only || CUDA_CONTENDERS[which].starts_with("ours"))
            .filter(|&which| !tf32_only || CUDA_CONTENDERS[which].contains("TF32"))
            .filter(|&which| !bf16_only || CUDA_CONTENDERS[which].contains("bf16"))
            .filter(|&which| shape.2 > 32 || !CUDA_CONTENDERS[which].contains("TF32"))
            .map(|which| {
                let Measured::Row(mut row) = cuda_contender(which, &data, false) else {
                    unreachable!("a timing run returns its row")
                };
                row.memory = if tf32_only || bf16_only {
                    Err("quick look".to_string())
                } else {
                    memory_in_fresh_process(which, shape)
                };
                row
            })
            .collect();
        print_rows(&rows, true);
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    use burn::backend::{Autodiff, NdArray};
    type B = Autodiff<NdArray<f32>>;
    let device = Default::default();
    print_header("CPU, NdArray f32 (no kernels: the stock-op bodies)");
    for shape in [(64, 128, 10), (512, 256, 10), (256, 128, 100)] {
        let data = HeadData::random(1, shape.0, shape.1, shape.2);
        let rows = [
            bench::<B>("ours NdArray", &device, &data, relu_head, &|_| {
                Err("no device pool on NdArray".to_string())
            }),
            bench::<B>("stock NdArray", &device, &data, stock_head_loss, &|_| {
                Err("no device pool on NdArray".to_string())
            }),
        ];
        print_rows(&rows, false);
    }
}
