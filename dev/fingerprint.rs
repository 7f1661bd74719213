//! Fingerprints of what every path computes: a hash of the bits of the loss, the gradients, the
//! logits and the six stages' outputs, over shapes that cross every switch of the dispatch, on
//! every backend of the build. Two builds that print the same lines compute the same bits; a
//! restructuring that must not change behaviour is checked by diffing their output.
//!
//!   cargo run --release --features cuda --bin fingerprint > after.txt   # Cuda, fusion on and off
//!   cargo run --release --features wgpu --bin fingerprint               # wgpu (lavapipe: slow)
//!
//! Without `cuda` or `wgpu` it fingerprints NdArray (the stock-op bodies).

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};
use burn_fused_head::gates::{run_stages, values};
use burn_fused_head::reference::HeadData;
use burn_fused_head::{
    FusedHeadBackend, HeadPrecision, linear_relu_cross_entropy_with, linear_relu_logits_with,
};

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
            let loss = linear_relu_cross_entropy_with(
                x.clone(),
                w.clone(),
                bias.clone(),
                labels.clone(),
                precision,
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
            let loss = linear_relu_cross_entropy_with(x, w.clone(), bias, labels, precision);
            let grads = loss.backward();
            println!(
                "{name} {precision:?} weight-only dw {}",
                grad(w.grad(&grads))
            );
            // The logits on the inner backend.
            let (x, w, bias, _) = data.tensors::<B::InnerBackend>(device, DType::F32);
            let h = linear_relu_logits_with(x, w, bias, precision);
            println!("{name} {precision:?} logits {}", hash(&values(h)));
        }
        // The six stages (the reference kernels), upstream gradient -1.5.
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

fn main() {
    #[cfg(feature = "cuda")]
    {
        use burn::backend::{Autodiff, Cuda};
        type Raw = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
        let device = burn::backend::cuda::CudaDevice::default();
        run::<Autodiff<Cuda>>("Cuda", &device);
        run::<Autodiff<Raw>>("CubeBackend", &device);
        return;
    }
    #[cfg(all(feature = "wgpu", not(feature = "cuda")))]
    {
        use burn::backend::{Autodiff, Vulkan};
        let device = burn_fused_head::vulkan::device();
        run::<Autodiff<Vulkan>>("Vulkan", &device);
        return;
    }
    #[allow(unreachable_code)]
    {
        use burn::backend::{Autodiff, NdArray};
        run::<Autodiff<NdArray<f32>>>("NdArray", &Default::default());
    }
}
