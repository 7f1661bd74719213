//! Bias and ReLU on a product already in Z: `Z = P + b` (b per column, in place), `H = ReLU(Z)`.
//!
//! Z (holding P on entry) and H are [B, C] contiguous, b is [C]. `Z <= 0` selects 0, so a NaN
//! passes through, as in stage 1. One unit per element; units past the end do nothing.

use cubecl::{cube, prelude::*};

#[cube(launch_unchecked)]
pub fn bias_relu<F: Float>(z: &mut Tensor<F>, b: &Tensor<F>, h: &mut Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos < z.len() {
        let v = z[pos] + b[pos % b.len()];
        z[pos] = v;
        h[pos] = select(v <= F::new(0.0), F::new(0.0), v);
    }
}
