//! The batch mean of the losses: `loss = sum_k parts[k] / B`.
//!
//! parts [K], out [1]: the per-row losses (K = B, stage 2's or the large-C rows' output), or
//! the per-cube sums of the small-C forwards. Shared by the stage kernels and the fast path. One cube: strided partials (`strided_sum`), then a fixed-order tree, so the
//! mean is the same bits on every run. With B = 0 the sum is 0 and the mean 0/0 = NaN, as
//! PyTorch's mean over nothing. A NaN row (invalid label, NaN input) makes the mean NaN.
//! Every read is guarded, so the host launches it without bound checks.

use cubecl::{cube, prelude::*};

use crate::reductions::tree::{strided_sum, tree_sum};

#[cube(launch_unchecked)]
pub fn mean_loss<F: Float>(
    parts: &Tensor<F>,
    out: &mut Tensor<F>,
    batch: u32,
    #[comptime] cube_units: usize,
) {
    let len = parts.shape(0);
    let unit = UNIT_POS as usize;
    let mut smem = SharedMemory::<F>::new(cube_units);

    // 1. Strided partial sums: parts unit, unit + CUBE_DIM, ... (several loads in flight).
    let stride = CUBE_DIM as usize;
    let count = select(unit < len, (len - unit).div_ceil(stride), 0usize);
    smem[unit] = strided_sum::<F>(parts, unit, stride, count);

    // 2. Fixed-order tree, then one division.
    let total = tree_sum::<F>(&mut smem);
    if unit == 0 {
        out[0] = total / F::cast_from(batch);
    }
}
