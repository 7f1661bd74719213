//! The activation and its derivative, written once for every kernel.
//!
//! `relu(z) = z` for `z > 0`, else 0. The test is `z <= 0 -> 0`, so a NaN pre-activation fails
//! it and stays NaN. The derivative takes its mask from the pre-activation Z (not from H: for
//! ReLU both masks agree, but Z is the value the derivative depends on); the subgradient at
//! `z = 0` is 0, as in Burn's own `relu_backward`.

use cubecl::{cube, prelude::*};

/// `ReLU(pre)`; NaN stays NaN.
#[cube]
pub fn relu<F: Float>(pre: F) -> F {
    select(pre <= F::new(0.0), F::new(0.0), pre)
}

/// `dZ = upstream [Z > 0]` for one element: `upstream` is `dH * g`. A NaN Z lets the
/// (NaN-carrying) gradient through.
#[cube]
pub fn relu_grad<F: Float>(z: F, upstream: F) -> F {
    select(z <= F::new(0.0), F::new(0.0), upstream)
}
