//! Stage 3, `relu_backward`: `dZ = dH * [Z > 0] * g`.
//!
//! Z, dH, dZ [B, C] contiguous; g [1] is the upstream gradient of the loss (1 for a plain
//! `loss.backward()`, anything else when the loss is scaled or summed with other losses).
//! The mask comes from the pre-activation Z, not from H: for ReLU both give the same mask, but
//! only Z says which forward value the derivative depends on. The subgradient at Z = 0 is 0,
//! as in Burn's own `relu_backward`. `Z <= 0` selects 0, so a NaN Z lets the gradient through
//! (NaN in, NaN out).
//!
//! One unit per element.

use cubecl::{cube, prelude::*};

#[cube(launch)]
pub fn relu_backward<F: Float>(z: &Tensor<F>, dh: &Tensor<F>, g: &Tensor<F>, dz: &mut Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos >= dz.len() {
        terminate!();
    }
    dz[pos] = select(z[pos] <= F::new(0.0), F::new(0.0), dh[pos] * g[0]);
}
