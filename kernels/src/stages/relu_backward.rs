//! Stage 3, `relu_backward`: `dZ = dH * [Z > 0] * g`.
//!
//! Z, dH, dZ [B, C] contiguous; g [1] is the upstream gradient of the loss (1 for a plain
//! `loss.backward()`, anything else when the loss is scaled or summed with other losses).
//! The mask and its subgradient at 0 are [`relu_grad`]'s. One unit per element.

use cubecl::{cube, prelude::*};

use crate::activation::activation_grad;

#[cube(launch)]
pub fn relu_backward<F: Float>(z: &Tensor<F>, dh: &Tensor<F>, g: &Tensor<F>, dz: &mut Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos >= dz.len() {
        terminate!();
    }
    dz[pos] = activation_grad::<F>(z[pos], dh[pos] * g[0], true);
}
