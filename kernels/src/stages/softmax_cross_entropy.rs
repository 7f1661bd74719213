//! Stage 2, `softmax_cross_entropy`: per-row loss and `dH` from the same probabilities.
//!
//! H [B, C] contiguous, labels [B], loss [B], dH [B, C]. One cube per row: the algebra and its
//! derivation are in [`crate::softmax_ce`] (this kernel is its one-cube-per-row pass,
//! [`softmax_cross_entropy_row`]). A label outside [0, C) gives that row a NaN loss and a NaN
//! dH row; the host passes `nan = f32::NAN`.

use cubecl::{cube, prelude::*};

use crate::softmax_ce::softmax_cross_entropy_row;

#[cube(launch)]
pub fn softmax_cross_entropy<F: Float, L: Int>(
    h: &Tensor<F>,
    labels: &Tensor<L>,
    loss: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    nan: f32,
    #[comptime] cube_units: usize,
) {
    softmax_cross_entropy_row::<F, L>(h, labels, loss, dh, nan, cube_units);
}
