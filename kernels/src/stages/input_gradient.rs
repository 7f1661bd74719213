//! Stage 6, `input_gradient`: `dX = dZ W`.
//!
//! dZ [B, C], W stored [C, I], dX [B, I], all contiguous: `dX[r, i] = sum_c dZ[r, c] * W[c, i]`,
//! the stored W used as is (no transpose on this side).
//!
//! One unit per element of dX, walking the classes in order. Naive on purpose.

use cubecl::{cube, prelude::*};

#[cube(launch)]
pub fn input_gradient<F: Float>(dz: &Tensor<F>, w: &Tensor<F>, dx: &mut Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos >= dx.len() {
        terminate!();
    }
    let classes = w.shape(0);
    let inputs = w.shape(1);
    let row = pos / inputs;
    let input = pos % inputs;

    let mut acc = F::new(0.0);
    for c in 0..classes {
        acc += dz[row * classes + c] * w[c * inputs + input];
    }
    dx[pos] = acc;
}
