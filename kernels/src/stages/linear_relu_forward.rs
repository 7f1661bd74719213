//! Stage 1, `linear_relu_forward`: `Z = X W^T + b` and `H = ReLU(Z)`, both written.
//!
//! X [B, I], W stored [C, I] (one class's coefficients are contiguous, so each output dot
//! product walks one row of X and one row of W), b [C], Z and H [B, C]; all contiguous.
//! Z is kept because backward takes the ReLU mask from Z, not from H.
//!
//! One unit per output element, linear index `r * C + c`. Naive on purpose: this is the
//! readable model for the fused variants.

use cubecl::{cube, prelude::*};

use crate::activation::activation;

#[cube(launch)]
pub fn linear_relu_forward<F: Float>(
    x: &Tensor<F>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    z: &mut Tensor<F>,
    h: &mut Tensor<F>,
) {
    let pos = ABSOLUTE_POS;
    if pos >= z.len() {
        terminate!();
    }
    let classes = w.shape(0);
    let inputs = w.shape(1);
    let row = pos / classes;
    let class = pos % classes;

    // 1. Dot product of row `row` of X with row `class` of W (that is, column `class` of W^T).
    let x_base = row * inputs;
    let w_base = class * inputs;
    let mut acc = F::new(0.0);
    for k in 0..inputs {
        acc += x[x_base + k] * w[w_base + k];
    }

    // 2. Bias, broadcast over the batch.
    let pre = acc + b[class];

    // 3. ReLU (a NaN pre-activation stays NaN in H).
    z[pos] = pre;
    h[pos] = activation::<F>(pre, true);
}
