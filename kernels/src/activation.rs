//! The activation between the linear layer and the softmax, and its derivative, written once
//! for every kernel. Which one is a compile-time choice (`relu`, a `#[comptime]` flag of each
//! kernel): a kernel is compiled once per activation, with no per-element branch.
//!
//! - ReLU (`relu` true): `relu(z) = z` for `z > 0`, else 0. The test is `z <= 0 -> 0`, so a
//!   NaN pre-activation fails it and stays NaN. The derivative takes its mask from the
//!   pre-activation Z (not from H: for ReLU both masks agree, but Z is the value the derivative
//!   depends on); the subgradient at `z = 0` is 0, as in Burn's own `relu_backward`.
//! - Identity (`relu` false): `H = Z`, `dZ = dH g`: cross-entropy on the logits themselves.
//!
//! Comments elsewhere write `act(Z)` for H and `act'(Z)` for the derivative's factor: `[Z > 0]`
//! for ReLU, 1 for the identity.

use cubecl::{cube, prelude::*};

/// `H` of one pre-activation: `ReLU(pre)` (NaN stays NaN), or `pre` itself.
#[cube]
pub fn activation<F: Float>(pre: F, #[comptime] relu: bool) -> F {
    let mut h = pre;
    if relu {
        h = select(pre <= F::new(0.0), F::new(0.0), pre);
    }
    h
}

/// `dZ` of one element: `upstream [Z > 0]` for ReLU (a NaN Z lets the NaN-carrying gradient
/// through), `upstream` for the identity; `upstream` is `dH * g`.
#[cube]
pub fn activation_grad<F: Float>(z: F, upstream: F, #[comptime] relu: bool) -> F {
    let mut dz = upstream;
    if relu {
        dz = select(z <= F::new(0.0), F::new(0.0), upstream);
    }
    dz
}
