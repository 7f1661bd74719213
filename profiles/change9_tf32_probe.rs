//! Probe (scratch branch only): how a TF32 product converts its f32 operands. Z = X W^T with W
//! all ones and every element of row r of X equal to one probe value v_r, so Z[r, c] / I is
//! v_r as the tensor cores saw it. I = 64 routes the product to cubek's SimpleTmaMma (patch
//! of change 9), I = 63 to our own TF32 kernel.
#[cfg(feature = "cuda")]
fn main() {
    use burn::tensor::{Tensor, TensorData};
    use burn_cubecl::CubeBackend;
    use burn_fused_head::{HeadPrecision, linear_relu_logits_with};
    use cubecl::cuda::CudaRuntime;
    type B = CubeBackend<CudaRuntime, f32, i32, u8>;
    let device = Default::default();
    let u = 2f32.powi(-10); // TF32's spacing in [1, 2)
    let probes = [
        ("1 + u/2 (tie, even below)", 1.0 + u / 2.0),
        ("1 + 3u/2 (tie, odd below)", 1.0 + 1.5 * u),
        ("1 + 3u/4", 1.0 + 0.75 * u),
        ("1 + u/4", 1.0 + 0.25 * u),
    ];
    for inputs in [64usize, 63] {
        let (rows, classes) = (256usize, 64usize);
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| probes[(i / inputs) % probes.len()].1)
            .collect();
        let x = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, inputs]), &device);
        let w = Tensor::<B, 2>::ones([classes, inputs], &device);
        let b = Tensor::<B, 1>::zeros([classes], &device);
        let h = linear_relu_logits_with(x, w, b, HeadPrecision::Tf32);
        let h: Vec<f32> = h.into_data().to_vec().unwrap();
        println!("I = {inputs}:");
        for (k, (name, v)) in probes.iter().enumerate() {
            let seen = h[k * classes] / inputs as f32;
            println!(
                "  {name}: input {v:.10} seen {seen:.10} ({:+} u/4 from 1)",
                ((seen - 1.0) / (u / 4.0)).round()
            );
        }
    }
    println!("rna: u/2 -> 1+u, 3u/2 -> 1+2u; rne: u/2 -> 1, 3u/2 -> 1+2u; truncation: u/2 -> 1, 3u/2 -> 1+u, 3u/4 -> 1");
}

#[cfg(not(feature = "cuda"))]
fn main() {}
