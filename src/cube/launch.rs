//! What every path of the CubeCL impl shares: the limits and checks, allocation, launch
//! geometry helpers, the label-type dispatch, the fixed-order sums and the hand-off of queued
//! launches to CubeCL's server thread. Depends on nothing else in `cube`.

use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeRuntime, FloatElement};
use burn_fused_head_kernels as kernels;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};

use crate::backend::HeadLimits;
use crate::options::HeadPrecision;
use crate::validate;

/// Units per cube of the element-wise kernels and of the one-cube-per-row or per-column
/// reductions. Invariant: a power of two (the shared-memory trees halve it) and a multiple of
/// every plane size, well under every runtime's limit; rows or columns longer than 256 are
/// covered by a strided loop.
pub(super) const CUBE_UNITS: u32 = 256;

/// What the kernels accept: f32, bf16 and f16 (the half types through [`super::half`]); 32-bit
/// addressing.
pub(super) const LIMITS: HeadLimits = HeadLimits {
    float_dtypes: Some(&[DType::F32, DType::BF16, DType::F16]),
    max_elements: u32::MAX as usize,
};

/// Every float input has one supported dtype, all are on one device, and each has a size the
/// kernels address. (Which kernels run for the dtype is the dispatch's choice, `super::as_is`.)
pub(super) fn check<R: CubeRuntime>(op: &str, tensors: &[&CubeTensor<R>]) {
    let dtypes: Vec<DType> = tensors.iter().map(|t| t.dtype).collect();
    validate::float_dtypes(op, &LIMITS, &dtypes);
    for t in &tensors[1..] {
        tensors[0].assert_is_on_same_device(t);
    }
    let counts: Vec<(&str, usize)> = tensors
        .iter()
        .map(|t| ("an input", t.shape().num_elements()))
        .collect();
    validate::element_counts(op, &LIMITS, &counts);
}

/// `t` made contiguous; without a kernel where it has no element (an empty batch): Burn's copy
/// of an empty view launches zero cubes, which CUDA refuses (`CUDA_ERROR_INVALID_VALUE`),
/// leaving the device's server unusable.
pub(super) fn contiguous<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
    if t.shape().num_elements() == 0 {
        let shape = t.shape();
        empty_device_contiguous_dtype(t.client.clone(), t.device.clone(), shape, t.dtype)
    } else {
        burn_cubecl::kernel::into_contiguous(t)
    }
}

/// A new contiguous float tensor of `shape` on `like`'s device.
pub(super) fn empty<R: CubeRuntime>(
    like: &CubeTensor<R>,
    shape: impl Into<Shape>,
) -> CubeTensor<R> {
    empty_of(like, shape, like.dtype)
}

/// A new contiguous tensor of `shape` and `dtype` on `like`'s device.
pub(super) fn empty_of<R: CubeRuntime>(
    like: &CubeTensor<R>,
    shape: impl Into<Shape>,
    dtype: DType,
) -> CubeTensor<R> {
    let shape = shape.into();
    validate::element_counts("allocate", &LIMITS, &[("an output", shape.num_elements())]);
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), shape, dtype)
}

/// `t` converted to `dtype` (itself where it has that dtype); without a kernel where it has no
/// element, as [`contiguous`].
pub(super) fn cast<R: CubeRuntime>(t: CubeTensor<R>, dtype: DType) -> CubeTensor<R> {
    if t.dtype == dtype {
        t
    } else if t.shape().num_elements() == 0 {
        empty_of(&t, t.shape(), dtype)
    } else {
        burn_cubecl::kernel::cast(t, dtype)
    }
}

/// Geometry of a one-unit-per-element kernel over `n` elements, or `None` when there is no work.
pub(super) fn elementwise<R: CubeRuntime>(
    like: &CubeTensor<R>,
    n: usize,
) -> Option<(CubeCount, CubeDim)> {
    (n > 0).then(|| {
        let dim = CubeDim::new_1d(CUBE_UNITS);
        (calculate_cube_count_elemwise(&like.client, n, dim), dim)
    })
}

/// The widest vector of at most `max` elements (4, 2 or 1) that divides `len`.
pub(super) fn vector_size(len: usize, max: usize) -> usize {
    [4, 2, 1]
        .into_iter()
        .find(|&n| n <= max && len.is_multiple_of(n))
        .unwrap_or(1)
}

/// The integer types the label kernels are compiled for.
pub(super) enum LabelType {
    I32,
    I64,
    U32,
    U64,
}

/// The labels' dtype picks the kernel's integer type; none is converted, so a huge label cannot
/// wrap into [0, C).
pub(super) fn label_type(op: &str, dtype: DType) -> LabelType {
    match dtype {
        DType::I32 => LabelType::I32,
        DType::I64 => LabelType::I64,
        DType::U32 => LabelType::U32,
        DType::U64 => LabelType::U64,
        other => panic!(
            "=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: labels of dtype {other:?} \
             are not supported; supported: I32, I64, U32, U64"
        ),
    }
}

/// `launch::<R, F, L>`, a host launch generic over the label type `L`, instantiated for the
/// labels' dtype: `by_label_type!(op, dtype, launch::<R, F>)` is a function pointer.
macro_rules! by_label_type {
    ($op:expr, $dtype:expr, $launch:ident::<$($generic:ty),*>) => {
        match $crate::cube::launch::label_type($op, $dtype) {
            $crate::cube::launch::LabelType::I32 => $launch::<$($generic,)* i32>,
            $crate::cube::launch::LabelType::I64 => $launch::<$($generic,)* i64>,
            $crate::cube::launch::LabelType::U32 => $launch::<$($generic,)* u32>,
            $crate::cube::launch::LabelType::U64 => $launch::<$($generic,)* u64>,
        }
    };
}
pub(super) use by_label_type;

/// `sum(parts) / batch` as a `[1]` tensor: one cube, also for no parts (B = 0 gives 0 / 0 = NaN).
pub(super) fn mean_of_parts<R: CubeRuntime, F: FloatElement>(
    parts: CubeTensor<R>,
    batch: usize,
) -> CubeTensor<R> {
    let out = empty::<R>(&parts, [1]); // [1]
    // SAFETY: the kernel guards its reads by the parts' length and writes out[0] only.
    unsafe {
        kernels::reductions::mean::mean_loss::launch_unchecked::<F, R>(
            &parts.client,
            CubeCount::new_single(),
            CubeDim::new_1d(CUBE_UNITS),
            parts.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            batch as u32,
            CUBE_UNITS as usize,
        );
    }
    out
}

/// The sum of `values` `[n]` (n > 0), `[1]`, in the pairwise order of the stock-op sums
/// (`crate::pairwise`), in one cube: [`crate::FusedHeadBackend::head_sum`].
pub(super) fn pairwise_sum<R: CubeRuntime, F: FloatElement>(
    values: CubeTensor<R>,
) -> CubeTensor<R> {
    let values = contiguous(values);
    let n = values.shape()[0];
    let scratch = empty::<R>(&values, [n]); // [n]
    let out = empty::<R>(&values, [1]); // [1]
    // SAFETY: values and scratch are contiguous [n], out is [1]; the kernel reads and writes
    // below n and writes out[0] only.
    unsafe {
        kernels::reductions::pairwise::pairwise_sum::launch_unchecked::<F, R>(
            &values.client,
            CubeCount::new_single(),
            CubeDim::new_1d(CUBE_UNITS),
            values.clone().into_tensor_arg(),
            scratch.into_tensor_arg(),
            out.clone().into_tensor_arg(),
        );
    }
    out
}

/// `out = sum_p part[p]`, in order, for a partial-sum tensor [P, ...] reshaped to `shape`. One
/// part is the sum itself: it is returned as it is (the same memory), with no launch.
pub(super) fn partial_sum<R: CubeRuntime, F: FloatElement>(
    part: CubeTensor<R>,
    shape: impl Into<Shape>,
) -> CubeTensor<R> {
    let shape = shape.into();
    if part.shape()[0] == 1 {
        return burn_cubecl::ops::reshape(part, shape);
    }
    let out = empty::<R>(&part, shape);
    let n = out.shape().num_elements();
    // OUTPUTS outputs per cube of 256 units; idle units past n write nothing.
    let cubes = n.div_ceil(kernels::reductions::partial_sum::OUTPUTS);
    if let Some((count, dim)) = elementwise(&out, cubes * CUBE_UNITS as usize) {
        // SAFETY: the kernel guards every read and write by the output's length.
        unsafe {
            kernels::reductions::partial_sum::partial_sum::launch_unchecked::<F, R>(
                &out.client,
                count,
                dim,
                part.into_tensor_arg(),
                out.clone().into_tensor_arg(),
            );
        }
    }
    out
}

/// The sums of two `[P, ..]` partials (dW's and db's, the same P) in one launch: the first's
/// outputs reshaped to `shape_a`, the second's to `[width_b]`. With one part, both are
/// reshapes; with none, both are zeros.
pub(super) fn partial_sum_pair<R: CubeRuntime, F: FloatElement>(
    part_a: CubeTensor<R>,
    shape_a: impl Into<Shape>,
    part_b: CubeTensor<R>,
    width_b: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    use kernels::reductions::partial_sum::{OUTPUTS, partial_sum_pair};
    let shape_a = shape_a.into();
    if part_a.shape()[0] == 1 {
        return (
            burn_cubecl::ops::reshape(part_a, shape_a),
            burn_cubecl::ops::reshape(part_b, Shape::from([width_b])),
        );
    }
    let out_a = empty::<R>(&part_a, shape_a);
    let out_b = empty::<R>(&part_b, [width_b]);
    let cubes_a = out_a.shape().num_elements().div_ceil(OUTPUTS);
    let cubes_b = width_b.div_ceil(OUTPUTS);
    if let Some((count, dim)) = elementwise(&out_a, (cubes_a + cubes_b) * CUBE_UNITS as usize) {
        // SAFETY: the kernel guards every read and write by its output's length.
        unsafe {
            partial_sum_pair::launch_unchecked::<F, R>(
                &out_a.client,
                count,
                dim,
                part_a.into_tensor_arg(),
                out_a.clone().into_tensor_arg(),
                part_b.into_tensor_arg(),
                out_b.clone().into_tensor_arg(),
                cubes_a as u32,
            );
        }
    }
    (out_a, out_b)
}

/// Whether a large-C product runs on TF32 tensor cores: allowed by `precision` and available
/// on the device of `like`.
pub(super) fn use_tf32<R: CubeRuntime>(precision: HeadPrecision, like: &CubeTensor<R>) -> bool {
    precision == HeadPrecision::Tf32 && tf32_available::<R>(&like.client)
}

/// The TF32 kernels need the cmma configuration m16 n16 k8 with TF32 inputs and f32
/// accumulators, and planes of exactly 32 units (they split a cube of 256 into 8 planes).
pub(super) fn tf32_available<R: CubeRuntime>(client: &cubecl::client::ComputeClient<R>) -> bool {
    use cubecl::ir::features::MmaConfig;
    use cubecl::ir::{ElemType, FloatKind};
    use kernels::large_classes::tf32_matmul::{FRAG, FRAG_K, PLANE};
    let props = client.properties();
    let config = MmaConfig {
        a_type: ElemType::Float(FloatKind::TF32).into(),
        b_type: ElemType::Float(FloatKind::TF32).into(),
        cd_type: ElemType::Float(FloatKind::F32).into(),
        m: FRAG as u32,
        n: FRAG as u32,
        k: FRAG_K as u32,
    };
    props.features.matmul.cmma.contains(&config)
        && props.hardware.plane_size_min == PLANE
        && props.hardware.plane_size_max == PLANE
}

/// Hands the launches queued so far on `device` to its server thread now, without waiting.
/// CubeCL 0.10 sends launches to one server thread per device, which takes them in batches of
/// 32 or at a flush (a sync is one): without this, a step of a few launches would wait for the
/// caller's sync before any kernel started, and the GPU would sit idle while the host builds
/// the rest of the step. Measured on the H200 (2026-11-30): the synced step at (64, 128, 10)
/// 29% faster without fusion, 27% with. It cannot hasten the server thread's wake-up from its
/// 150 us sleeps, which a synced step at large B also waits for.
pub(super) fn start_queued<R: CubeRuntime>(device: &R::Device) {
    use cubecl::device::Device;
    cubecl::device_handle::DeviceHandle::<R::Server>::new(device.to_id()).flush_queue();
}
