//! Stage 4, `weight_gradient`: `dW = dZ^T X`, stored [C, I] like W.
//!
//! dZ [B, C], X [B, I], dW [C, I], all contiguous. dZ^T is never materialised: the transpose
//! is only in the indexing, `dW[c, i] = sum_r dZ[r, c] * X[r, i]`.
//!
//! One unit per element of dW, walking the batch in order (deterministic). Naive on purpose.

use cubecl::{cube, prelude::*};

#[cube(launch)]
pub fn weight_gradient<F: Float>(dz: &Tensor<F>, x: &Tensor<F>, dw: &mut Tensor<F>) {
    let pos = ABSOLUTE_POS;
    if pos >= dw.len() {
        terminate!();
    }
    let batch = x.shape(0);
    let inputs = x.shape(1);
    let classes = dz.shape(1);
    let class = pos / inputs;
    let input = pos % inputs;

    let mut acc = F::new(0.0);
    for r in 0..batch {
        acc += dz[r * classes + class] * x[r * inputs + input];
    }
    dw[pos] = acc;
}
