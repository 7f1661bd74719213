//! The large-C fast path's per-row and per-column kernels around the three products: the
//! softmax cross-entropy of each row of H, the masked gradient dZ, and the bias gradient.
//!
//! Each is the fast path's own launch of a helper shared with the stage kernels (which the
//! fast path never launches): [`softmax_cross_entropy_row`] (the algebra of
//! [`crate::softmax_ce`]), [`activation_grad`] and [`column_sum`]. So the fast path computes the same
//! values, term by term, as stages 2, 3 and 5, and every access is guarded: the host launches
//! these kernels without CubeCL's bound checks.

use cubecl::{cube, prelude::*};

use crate::activation::activation_grad;
use crate::reductions::columns::column_sum;
use crate::softmax_ce::softmax_cross_entropy_row;

/// Per-row loss [B] and dH [B, C] of H [B, C], one cube per row of `cube_units` units.
#[cube(launch_unchecked)]
pub fn softmax_cross_entropy_rows<F: Float, L: Int>(
    h: &Tensor<F>,
    labels: &Tensor<L>,
    loss: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    nan: f32,
    #[comptime] cube_units: usize,
) {
    softmax_cross_entropy_row::<F, L>(h, labels, loss, dh, nan, cube_units);
}

/// `dZ = dH act'(Z) g`, [B, C], one unit per element; g [1] is the upstream gradient.
#[cube(launch_unchecked)]
pub fn masked_gradient<F: Float>(
    z: &Tensor<F>,
    dh: &Tensor<F>,
    g: &Tensor<F>,
    dz: &mut Tensor<F>,
    #[comptime] relu: bool,
) {
    let pos = ABSOLUTE_POS;
    if pos < dz.len() {
        dz[pos] = activation_grad::<F>(z[pos], dh[pos] * g[0], relu);
    }
}

/// `db = column_sum(dZ)`, [C], one cube per class of `cube_units` units.
#[cube(launch_unchecked)]
pub fn column_sums<F: Float>(dz: &Tensor<F>, db: &mut Tensor<F>, #[comptime] cube_units: usize) {
    column_sum::<F>(dz, db, cube_units);
}
