//! The TF32 kernels' operand rounding (`round_tf32` in the kernels crate) against the TF32
//! reference's (`gates::round_tf32`), bit for bit, on values chosen to hit every branch: ties
//! with an even and an odd neighbour below, either side of a tie, signs, a carry into the
//! exponent, a round up past the largest finite f32, subnormals, zeros, infinities and NaN.
//! The kernel is a test-only wrapper, so it runs on wgpu too (the TF32 kernels need CUDA).
#![cfg(feature = "cube")]

use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{CubeBackend, CubeRuntime};
use burn_fused_head_testing::gates::round_tf32;

#[cfg(feature = "wgpu")]
mod common;

mod probe {
    use cubecl::{cube, prelude::*};

    /// `out[i] = round_tf32(v[i])`.
    #[cube(launch)]
    pub fn round_all<F: Float>(v: &Tensor<F>, out: &mut Tensor<F>) {
        let pos = ABSOLUTE_POS;
        if pos < v.len() {
            out[pos] = burn_fused_head_kernels::large_classes::tf32_matmul::round_tf32::<F>(v[pos]);
        }
    }
}

/// The probe values: hand-picked cases, then a spread of pseudo-random bit patterns.
fn probe_values() -> Vec<f32> {
    let ulp = 2f32.powi(-10); // TF32's spacing in [1, 2)
    let tiny = 2f32.powi(-23); // f32's spacing in [1, 2)
    let mut v = vec![
        1.0,
        1.0 + ulp / 2.0,        // tie, even below: down
        1.0 + 1.5 * ulp,        // tie, odd below: up
        1.0 + ulp / 2.0 - tiny, // below a tie
        1.0 + ulp / 2.0 + tiny, // above a tie
        -(1.0 + ulp / 2.0),
        -(1.0 + 1.5 * ulp),
        2.0 - ulp / 4.0, // carry into the exponent
        f32::MAX,        // rounds past the largest finite value
        -f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(0x0000_1000), // subnormal tie, even below
        f32::from_bits(0x0000_3000), // subnormal tie, odd below
        f32::from_bits(0x0000_0fff), // subnormal below a tie
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut state = 0x2545_f491_u32;
    for _ in 0..4096 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let x = f32::from_bits(state);
        if x.is_finite() {
            v.push(x);
        }
    }
    v
}

fn kernel_matches_reference<R: CubeRuntime>(device: &R::Device) {
    type B<R> = CubeBackend<R, f32, i32, u8>;
    let values = probe_values();
    let n = values.len();
    let v =
        Tensor::<B<R>, 1>::from_data(TensorData::new(values.clone(), [n]), (device, DType::F32))
            .into_primitive()
            .tensor();
    let out = Tensor::<B<R>, 1>::zeros([n], (device, DType::F32))
        .into_primitive()
        .tensor();
    let client = v.client.clone();
    probe::round_all::launch::<f32, R>(
        &client,
        cubecl::CubeCount::new_1d(n.div_ceil(256) as u32),
        cubecl::CubeDim::new_1d(256),
        v.into_tensor_arg(),
        out.clone().into_tensor_arg(),
    );
    let got: Vec<f32> = Tensor::<B<R>, 1>::from_primitive(TensorPrimitive::Float(out))
        .into_data()
        .to_vec()
        .unwrap();
    let mut misses = Vec::new();
    for (&x, &g) in values.iter().zip(&got) {
        let want = round_tf32(x as f64) as f32;
        let same = if want.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == want.to_bits()
        };
        if !same {
            misses.push(format!(
                "{x:e} ({:#010x}): kernel {g:e} ({:#010x}), reference {want:e} ({:#010x})",
                x.to_bits(),
                g.to_bits(),
                want.to_bits()
            ));
        }
    }
    assert!(
        misses.is_empty(),
        "{} of {n} differ:\n{}",
        misses.len(),
        misses.join("\n")
    );
    // The hand-picked ties really are decided differently from `__float_to_tf32` (ties away).
    let ulp = 2f32.powi(-10);
    assert_eq!(got[1], 1.0);
    assert_eq!(got[2], 1.0 + 2.0 * ulp);
    assert_eq!(got[8], f32::INFINITY);
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_round_tf32_matches_reference() {
    kernel_matches_reference::<burn::backend::wgpu::WgpuRuntime>(&common::vulkan_device());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_round_tf32_matches_reference() {
    kernel_matches_reference::<cubecl::cuda::CudaRuntime>(&Default::default());
}
