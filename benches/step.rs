//! Criterion benchmark of the full training step (forward, backward to X, W and b, synced): our
//! op against Burn's stock head, same inputs, same backend.
//!
//! cargo bench --bench step                    # NdArray f32, small shapes (any machine)
//! cargo bench --bench step --features cuda    # adds the default `Cuda` type
//!
//! Criterion gives the statistics; `benches/head.rs` prints the side-by-side table with
//! first-call latency, memory and the floor, which BENCHMARKS.md comes from.

use burn::tensor::DType;
use burn::tensor::backend::AutodiffBackend;
use burn_fused_head::reference::{HeadData, stock_head_loss};
use burn_fused_head::{FusedHeadBackend, linear_relu_cross_entropy};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// (B, I, C) small enough for a CPU.
const SHAPES: [(usize, usize, usize); 2] = [(64, 128, 10), (512, 256, 10)];

/// Benchmarks ours and stock on backend `B` under `label`, one group per shape.
fn steps<B: AutodiffBackend + FusedHeadBackend>(
    c: &mut Criterion,
    label: &str,
    device: &B::Device,
) {
    for (b, i, k) in SHAPES {
        let data = HeadData::random(1, b, i, k);
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let (x, w, bias) = (x.require_grad(), w.require_grad(), bias.require_grad());
        let mut group = c.benchmark_group(format!("step B={b} I={i} C={k}"));
        for (name, head) in [
            (
                "ours",
                linear_relu_cross_entropy::<B> as fn(_, _, _, _) -> _,
            ),
            ("stock", stock_head_loss::<B>),
        ] {
            group.bench_function(BenchmarkId::new(name, label), |bencher| {
                bencher.iter(|| {
                    let loss = head(x.clone(), w.clone(), bias.clone(), labels.clone());
                    let grads = loss.backward();
                    let kept = (x.grad(&grads), w.grad(&grads), bias.grad(&grads));
                    B::sync(device).unwrap();
                    kept
                })
            });
        }
        group.finish();
    }
}

fn cpu(c: &mut Criterion) {
    use burn::backend::{Autodiff, NdArray};
    steps::<Autodiff<NdArray<f32>>>(c, "NdArray", &Default::default());
}

#[cfg(feature = "cuda")]
fn cuda(c: &mut Criterion) {
    use burn::backend::{Autodiff, Cuda};
    steps::<Autodiff<Cuda>>(c, "Cuda", &Default::default());
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: &mut Criterion) {}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = cpu, cuda
}
criterion_main!(benches);
