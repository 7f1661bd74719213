//! Bias and ReLU on a product already computed: `Z = P + b` (b per column, in place),
//! `H = ReLU(Z)`; or, for the logits alone, `H = ReLU(P + b)` in place of P.
//!
//! Z (holding P on entry) and H are [B, C] contiguous, b is [C]. `Z <= 0` selects 0, so a NaN
//! passes through, as in stage 1. One unit per element; units past the end do nothing.

use cubecl::{cube, prelude::*};

/// `Z = P + b` in place, and `H = ReLU(Z)`: the training forward, whose backward needs Z.
#[cube(launch_unchecked)]
pub fn bias_relu<F: Float>(z: &mut Tensor<F>, b: &Tensor<F>, h: &mut Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos < z.len() {
        let v = z[pos] + b[pos % b.len()];
        z[pos] = v;
        h[pos] = select(v <= F::new(0.0), F::new(0.0), v);
    }
}

/// `H = ReLU(P + b)` in place of P: the logits alone, which never need Z (no second [B, C]
/// buffer, one write per element instead of two).
#[cube(launch_unchecked)]
pub fn bias_relu_in_place<F: Float>(p: &mut Tensor<F>, b: &Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos < p.len() {
        let v = p[pos] + b[pos % b.len()];
        p[pos] = select(v <= F::new(0.0), F::new(0.0), v);
    }
}
