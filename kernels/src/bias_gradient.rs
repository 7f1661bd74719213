//! Stage 5, `bias_gradient`: `db[c] = sum_r dZ[r, c]`.
//!
//! dZ [B, C] contiguous, db [C]. The bias broadcasts over the batch in the forward pass, so its
//! gradient sums over that same dimension: one number per class, not one per example.
//!
//! One cube per class: each unit sums a strided slice of the column, then a tree in shared
//! memory adds the partials in a fixed order (no atomics, same bits every run).

use cubecl::{cube, prelude::*};

use crate::tree::tree_sum;

#[cube(launch)]
pub fn bias_gradient<F: Float>(dz: &Tensor<F>, db: &mut Tensor<F>, #[comptime] cube_units: usize) {
    let batch = dz.shape(0);
    let classes = dz.shape(1);
    let class = CUBE_POS;
    if class >= classes {
        terminate!();
    }
    let unit = UNIT_POS as usize;
    let mut smem = SharedMemory::<F>::new(cube_units);

    // 1. Strided partial sums down the column.
    let mut acc = F::new(0.0);
    let mut r = unit;
    while r < batch {
        acc += dz[r * classes + class];
        r += CUBE_DIM as usize;
    }
    smem[unit] = acc;

    // 2. Fixed-order tree over the partials.
    let total = tree_sum::<F>(&mut smem);
    if unit == 0 {
        db[class] = total;
    }
}
