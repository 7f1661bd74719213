//! Column sums of a [B, C] matrix, one cube per column: `out[c] = sum_r t[r, c]`, the bias
//! gradient `db = column_sum(dZ)` of stage 5 (the stage kernels) and of the large-C backward.
//!
//! Each unit sums a strided slice of the column, then a tree in shared memory adds the partials
//! in a fixed order (no atomics, same bits every run). With B = 0 each cube writes 0, the sum
//! over no rows.

use cubecl::{cube, prelude::*};

use crate::reductions::tree::tree_sum;

/// Column `CUBE_POS` of `t` [B, C] into `out[CUBE_POS]`; cubes past C leave at once.
/// `cube_units` is the cube's size, a power of two.
#[cube]
pub fn column_sum<F: Float>(t: &Tensor<F>, out: &mut Tensor<F>, #[comptime] cube_units: usize) {
    let class = CUBE_POS;
    if class >= t.shape(1) {
        terminate!();
    }
    let total = column_total::<F>(t, class, cube_units);
    if UNIT_POS == 0 {
        out[class] = total;
    }
}

/// `sum_r t[r, class]` of `t` [B, C], which every unit of the cube gets: a strided partial per
/// unit, then a fixed-order tree over `cube_units` slots of shared memory.
#[cube]
pub fn column_total<F: Float>(t: &Tensor<F>, class: usize, #[comptime] cube_units: usize) -> F {
    let batch = t.shape(0);
    let classes = t.shape(1);
    let unit = UNIT_POS as usize;
    let mut smem = SharedMemory::<F>::new(cube_units);

    // 1. Strided partial sums down the column.
    let mut acc = F::new(0.0);
    let mut r = unit;
    while r < batch {
        acc += t[r * classes + class];
        r += CUBE_DIM as usize;
    }
    smem[unit] = acc;

    // 2. Fixed-order tree over the partials.
    tree_sum::<F>(&mut smem)
}
