//! The gates catch an indexing bug in a real kernel: a test-only weight-gradient kernel that reads dZ as
//! if it were stored transposed (`dZ[c * B + r]`) must fail the dW gate, and only the dW gate.
//! Runs on the CubeCL backends (`--features wgpu` or `cuda`).
#![cfg(feature = "cube")]

mod common;

use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{CubeBackend, CubeRuntime};
use burn_fused_head_testing::gates::{GATE_NAMES, run_stages};
use burn_fused_head_testing::reference::HeadData;
use common::reference_stages;

mod faulty {
    use cubecl::{cube, prelude::*};

    /// `dW[c, i] = sum_r dZ[c * B + r] * X[r, i]`: the transposed-buffer mistake.
    #[cube(launch)]
    pub fn weight_gradient_transposed_dz<F: Float>(
        dz: &Tensor<F>,
        x: &Tensor<F>,
        dw: &mut Tensor<F>,
    ) {
        let pos = ABSOLUTE_POS;
        if pos >= dw.len() {
            terminate!();
        }
        let batch = x.shape(0);
        let inputs = x.shape(1);
        let class = pos / inputs;
        let input = pos % inputs;
        let mut acc = F::new(0.0);
        for r in 0..batch {
            acc += dz[class * batch + r] * x[r * inputs + input];
        }
        dw[pos] = acc;
    }
}

fn only_dw_fails<R: CubeRuntime>(device: &R::Device) {
    type B<R> = CubeBackend<R, f32, i32, u8>;
    let data = HeadData::random(37, 12, 5, 4);
    let (x, w, b, labels) = data.tensors::<B<R>>(device, DType::F32);
    let mut got = run_stages(x.clone(), w, b, labels, 1.0);

    let dz = Tensor::<B<R>, 2>::from_data(
        TensorData::new(got.dz.clone(), [data.batch, data.classes]),
        (device, DType::F32),
    )
    .into_primitive()
    .tensor();
    let x = x.into_primitive().tensor();
    let dw = Tensor::<B<R>, 2>::zeros([data.classes, data.inputs], (device, DType::F32))
        .into_primitive()
        .tensor();
    let client = x.client.clone();
    faulty::weight_gradient_transposed_dz::launch::<f32, R>(
        &client,
        cubecl::CubeCount::new_single(),
        cubecl::CubeDim::new_1d(256),
        dz.into_tensor_arg(),
        x.into_tensor_arg(),
        dw.clone().into_tensor_arg(),
    );
    got.dw = common::to_f64(Tensor::<B<R>, 2>::from_primitive(TensorPrimitive::Float(
        dw,
    )));

    let reports = got.gates(&reference_stages(&data, 1.0));
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        failed,
        vec![GATE_NAMES[5]],
        "only dW may fail: {reports:#?}"
    );
}

#[cfg(feature = "wgpu")]
#[test]
fn a_mis_indexed_weight_gradient_fails_only_the_dw_gate_on_wgpu() {
    only_dw_fails::<burn::backend::wgpu::WgpuRuntime>(&common::vulkan_device());
}

#[cfg(feature = "cuda")]
#[test]
fn a_mis_indexed_weight_gradient_fails_only_the_dw_gate_on_cuda() {
    only_dw_fails::<cubecl::cuda::CudaRuntime>(&Default::default());
}
