//! The TF32 products on Burn's own matmul library (cubek 0.2): `SimpleTmaMma` (TMA loads, PTX
//! `mma` m16n8k8), one fixed blueprint per product, never autotuned.
//!
//! Each product's blueprint is forced through [`ForcedTf32`]: the ones measured fastest on the
//! H200, not cubek's inferred one. The operands reach the tensor cores rounded to TF32 to
//! nearest, ties to even, as in our own TF32 kernels (probed on the H200; the parity tests
//! check both against the same reference). Where cubek does not take a problem, [`product`]
//! returns `None` and the caller runs our own kernels.

use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubek::matmul::components::stage::PartitionBuffering;
use cubek::matmul::components::tile::TileMatmulKind;
use cubek::matmul::definition::{
    MatmulElems, MatmulGlobalElems, MatmulProblem, TilingBlueprint, TilingScheme,
};
use cubek::matmul::routines::BlueprintStrategy;
use cubek::std::InputBinding;
use cubek::std::cube_count::{CubeCountStrategy, GlobalOrder, HypercubeBlueprint, SmAllocation};

/// Which of the head's three products a TF32 matmul is: the blueprint depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Product {
    /// `Z = X W^T`: M = B, N = C, K = I.
    Logits,
    /// `dW = dZ^T X`: M = C, N = I, K = B.
    WeightGradient,
    /// `dX = dZ W`: M = B, N = I, K = C.
    InputGradient,
}

/// A forced tiling: `mma` tiles (16 x 8 x 8) per plane along M, N, K, and planes per stage along
/// M, N (each plane owns one partition of the stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiling {
    tiles: (u32, u32, u32),
    planes: (u32, u32),
}

/// The blueprint of `product`: a stage of 128 x 128 outputs with K steps of 32 for all three,
/// one plane per 32 x 128 strip for `Z = X W^T`, one per 64 x 64 quarter for the two gradients.
/// Tuning, measured on the H200 (2026-11-30) against cubek's inferred blueprint (128 x 64
/// outputs, K steps of 16) and 26 other blueprints at (8192, 4096, 32000), then at
/// (8192, 1024, C) for C = 100, 1000 and 8000: the TF32 step from 70.8 to 54.6 ms at
/// C = 32000 and from 6.04 to 4.79 ms at C = 8000, within noise at C = 100 and 1000. One rule
/// for every shape: no autotune, no sweep at first use.
fn tiling(product: Product) -> Tiling {
    match product {
        Product::Logits => Tiling {
            tiles: (2, 16, 4),
            planes: (4, 1),
        },
        Product::WeightGradient | Product::InputGradient => Tiling {
            tiles: (4, 8, 4),
            planes: (2, 2),
        },
    }
}

/// Whether TMA can read the 2-D view `t`: one dimension of unit stride, and the other's stride
/// (the stored row's length, any pitch included) a multiple of 16 bytes. Our allocations and
/// views start on aligned addresses (burn-cubecl copies a slice that would not).
fn readable<R: CubeRuntime>(t: &CubeTensor<R>) -> bool {
    let strides = t.meta.strides();
    let (unit, row) = if strides[1] == 1 {
        (strides[1], strides[0])
    } else {
        (strides[0], strides[1])
    };
    unit == 1 && (row * t.dtype.size()).is_multiple_of(16)
}

/// Whether the device of `client` has the tensor memory accelerator that cubek's TMA kernel
/// loads through (CubeCL sets it on CUDA devices of compute capability 9.0 and above). Checked
/// before anything is built or allocated, so a device without TMA (an A100, wgpu) costs no
/// refused launch per call.
fn has_tma<R: CubeRuntime>(client: &cubecl::client::ComputeClient<R>) -> bool {
    client
        .properties()
        .features
        .tma
        .contains(cubecl::features::Tma::Base)
}

/// `A B` on TF32 tensor cores for `a` [M, K] and `b` [K, N] (views of any layout), the head's
/// `product`. `None`, with nothing built or allocated, for an empty product, on a device without
/// TMA, or for a view TMA cannot read ([`readable`]); `None` too where cubek refuses the problem
/// (it validates before launching anything). The caller then runs its own kernel.
pub(super) fn product<R: CubeRuntime>(
    a: CubeTensor<R>,
    b: CubeTensor<R>,
    product: Product,
) -> Option<CubeTensor<R>> {
    let [m, k, n] = [a.meta.shape()[0], a.meta.shape()[1], b.meta.shape()[1]];
    if m * n * k == 0 || !has_tma(&a.client) || !readable(&a) || !readable(&b) {
        return None;
    }
    let out = super::launch::empty::<R>(&a, [m, n]); // [M, N]
    let dtype: cubecl::ir::StorageType = a.dtype.into();
    let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: dtype,
        rhs: dtype,
        out: dtype,
    });
    let problem = MatmulProblem::from_shapes_and_strides(
        a.meta.shape().clone(),
        b.meta.shape().clone(),
        out.meta.shape().clone(),
        a.meta.strides().clone(),
        b.meta.strides().clone(),
        out.meta.strides().clone(),
        dtypes.as_global_elems(),
        cubecl::ir::AddressType::U32,
        None,
        None,
    )
    .ok()?;
    let blueprint = forced_blueprint(&out.client, &problem, tiling(product))?;
    cubek::matmul::launch::launch_tiling::launch_ref_tma::<R, ForcedTf32>(
        &out.client,
        InputBinding::new(a.binding(), dtype),
        InputBinding::new(b.binding(), dtype),
        out.clone().binding(),
        &BlueprintStrategy::Forced(blueprint),
        &mut dtypes,
    )
    .ok()
    .map(|()| out)
}

/// cubek's blueprint for `tiling`, with the rest as its inferred multi-row TF32 blueprint has
/// it: one buffer per partition, cubes ordered by `SwizzleRow(4)` and counted per SM.
fn forced_blueprint<R: CubeRuntime>(
    client: &cubecl::client::ComputeClient<R>,
    problem: &MatmulProblem,
    tiling: Tiling,
) -> Option<TilingBlueprint> {
    let scheme = TilingScheme::builder()
        .with_tile_size((16, 8, 8).into())
        .with_partition_size(tiling.tiles.into())
        .with_stage_size((tiling.planes.0, tiling.planes.1, 1).into())
        .build()
        .ok()?;
    let cube_count_strategy = match client.properties().hardware.num_streaming_multiprocessors {
        Some(num_sms) => CubeCountStrategy::Sm {
            num_sms,
            sm_usage: SmAllocation::Exact,
            cubes_first: true,
        },
        None => CubeCountStrategy::FromProblem,
    };
    let hypercube = HypercubeBlueprint::builder()
        .global_order(GlobalOrder::SwizzleRow(4))
        .cube_count_strategy(cube_count_strategy)
        .build();
    let plane_dim = client.properties().hardware.plane_size_max;
    Some(
        TilingBlueprint::builder(TileMatmulKind::Mma, scheme, plane_dim, problem)
            .partition_buffering(PartitionBuffering::Single)
            .hypercube_blueprint(hypercube)
            .build(),
    )
}

/// cubek's `SimpleTmaAlgorithm` with a forced blueprint on TF32 registers. cubek 0.2's own
/// `Forced` path keeps the f32 register types of f32 operands, for which `mma` has no
/// configuration (it refuses every blueprint); only its inferred path switches them to TF32
/// (`adjust_dtypes`). This routine does that switch and forwards everything else.
struct ForcedTf32;

mod routine {
    use cubecl::prelude::*;
    use cubek::matmul::definition::{MatmulElems, MatmulProblem, MatmulSetupError, adjust_dtypes};
    use cubek::matmul::routines::simple::SimpleTmaAlgorithm;
    use cubek::matmul::routines::{
        BlueprintStrategy, DeviceSettings, ExpandInfo, LaunchInfo, Routine,
    };

    type Simple = SimpleTmaAlgorithm;

    impl Routine<()> for super::ForcedTf32 {
        type Strategy = <Simple as Routine<()>>::Strategy;
        type Blueprint = <Simple as Routine<()>>::Blueprint;
        type Config = <Simple as Routine<()>>::Config;
        type BatchMatmul = <Simple as Routine<()>>::BatchMatmul;

        fn expand_blueprint<R: Runtime>(
            problem: &MatmulProblem,
            device_settings: &DeviceSettings<R>,
            strategy: &BlueprintStrategy<(), Self>,
        ) -> Result<ExpandInfo<Self::Blueprint>, MatmulSetupError> {
            let BlueprintStrategy::Forced(blueprint) = strategy else {
                unreachable!("ForcedTf32 is launched with a forced blueprint only")
            };
            let mut dtypes = MatmulElems::from_globals(&problem.global_dtypes);
            adjust_dtypes(&device_settings.client, &mut dtypes, true);
            Ok(ExpandInfo {
                blueprint: blueprint.clone(),
                dtypes,
            })
        }

        fn prepare<R: Runtime>(
            problem: &MatmulProblem,
            device_settings: &DeviceSettings<R>,
            expand_info: ExpandInfo<Self::Blueprint>,
        ) -> Result<LaunchInfo<Self::Blueprint>, MatmulSetupError> {
            <Simple as Routine<()>>::prepare(problem, device_settings, expand_info)
        }
    }
}

#[cfg(test)]
#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, Tensor, TensorPrimitive};
    use burn_cubecl::CubeBackend;

    type B<R> = CubeBackend<R, f32, i32, u8>;

    /// A random [rows, cols] tensor stored contiguously, as the op's operands are (CubeCL
    /// pitches a new tensor's rows on CUDA: [256, 63] is made with a row stride of 64).
    fn stored<R: CubeRuntime>(rows: usize, cols: usize, device: &R::Device) -> CubeTensor<R> {
        let t = Tensor::<B<R>, 2>::random([rows, cols], Distribution::Uniform(-1.0, 1.0), device);
        burn_cubecl::kernel::into_contiguous(t.into_primitive().tensor())
    }

    fn values<R: CubeRuntime>(t: CubeTensor<R>) -> Vec<f64> {
        Tensor::<B<R>, 2>::from_primitive(TensorPrimitive::Float(t))
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .expect("f64 values")
    }

    fn transposed<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
        burn_cubecl::ops::permute(t, &[1, 0])
    }

    /// `product` runs exactly where TMA can read its views on a device with TMA, matching the
    /// f64 product within TF32's rounding of both operands (2^-11 each, so 2^-9 of the sum of
    /// |a b| leaves a factor 2), and returns `None` elsewhere without running anything.
    fn takes_what_tma_reads<R: CubeRuntime>(device: &R::Device) {
        let (m, k, n) = (256, 64, 128);
        let (a, w) = (stored::<R>(m, k, device), stored::<R>(n, k, device));
        let tma = has_tma(&a.client);
        let taken = product(a.clone(), transposed(w.clone()), Product::Logits);
        assert_eq!(taken.is_some(), tma, "TMA device: {tma}");
        if let Some(taken) = taken {
            let (a, w, got) = (values(a), values(w), values(taken));
            for (i, j) in (0..m).flat_map(|i| (0..n).map(move |j| (i, j))) {
                let terms = (0..k).map(|l| a[i * k + l] * w[j * k + l]);
                let (exact, size) = terms.fold((0.0, 0.0), |(s, t), p| (s + p, t + p.abs()));
                let error = (got[i * n + j] - exact).abs();
                assert!(
                    error <= size / 512.0,
                    "({i}, {j}): {} vs {exact}",
                    got[i * n + j]
                );
            }
        }
        // An empty product, rows of 63 floats (252 bytes), a transposed view of rows of 250.
        let refused = [
            (stored::<R>(m, 0, device), stored::<R>(0, n, device)),
            (
                stored::<R>(m, 63, device),
                transposed(stored::<R>(n, 63, device)),
            ),
            (
                transposed(stored::<R>(k, 250, device)),
                stored::<R>(k, n, device),
            ),
        ];
        for (a, b) in refused {
            let views = format!(
                "{:?} {:?}, {:?} {:?}",
                a.meta.shape(),
                a.meta.strides(),
                b.meta.shape(),
                b.meta.strides()
            );
            let taken = product(a, b, Product::WeightGradient);
            assert!(taken.is_none(), "taken: {views}");
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_takes_what_tma_reads() {
        takes_what_tma_reads::<cubecl::cuda::CudaRuntime>(&Default::default());
    }

    #[cfg(feature = "wgpu")]
    #[test]
    fn wgpu_takes_nothing_without_tma() {
        // Without a Vulkan driver wgpu's adapter selection panics; the integration tests name
        // the install command (`tests/common`).
        takes_what_tma_reads::<cubecl::wgpu::WgpuRuntime>(&Default::default());
    }
}
