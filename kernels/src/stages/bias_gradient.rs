//! Stage 5, `bias_gradient`: `db[c] = sum_r dZ[r, c]`.
//!
//! dZ [B, C] contiguous, db [C]. The bias broadcasts over the batch in the forward pass, so its
//! gradient sums over that same dimension: one number per class, not one per example. One cube
//! per class, summed in a fixed order by [`column_sum`].

use cubecl::{cube, prelude::*};

use crate::reductions::columns::column_sum;

#[cube(launch)]
pub fn bias_gradient<F: Float>(dz: &Tensor<F>, db: &mut Tensor<F>, #[comptime] cube_units: usize) {
    column_sum::<F>(dz, db, cube_units);
}
