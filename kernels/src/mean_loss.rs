//! The batch mean of the per-row losses: `loss = sum_r loss_rows[r] / B`.
//!
//! loss_rows [B], out [1]. One cube: strided partials (`strided_sum`), then a fixed-order tree, so the mean is
//! the same bits on every run. With B = 0 the sum is 0 and the mean 0/0 = NaN, as PyTorch's
//! mean over nothing. A NaN row (invalid label, NaN input) makes the mean NaN.

use cubecl::{cube, prelude::*};

use crate::tree::{strided_sum, tree_sum};

#[cube(launch)]
pub fn mean_loss<F: Float>(
    loss_rows: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] cube_units: usize,
) {
    let batch = loss_rows.shape(0);
    let unit = UNIT_POS as usize;
    let mut smem = SharedMemory::<F>::new(cube_units);

    // 1. Strided partial sums: rows unit, unit + CUBE_DIM, ... (several loads in flight).
    let stride = CUBE_DIM as usize;
    let count = select(unit < batch, (batch - unit).div_ceil(stride), 0usize);
    smem[unit] = strided_sum::<F>(loss_rows, unit, stride, count);

    // 2. Fixed-order tree, then one division.
    let total = tree_sum::<F>(&mut smem);
    if unit == 0 {
        out[0] = total / F::cast_from(batch);
    }
}
