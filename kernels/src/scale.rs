//! `scale_unless_one`: a gradient times the upstream gradient `g` `[1]`, in place, read on the
//! device: where `g[0]` is exactly 1 the kernel reads g alone and writes nothing (`x * 1` is
//! `x`, bit for bit), so the backward step of a call whose gradients were computed in its
//! forward pass applies g with no read of it by the host (a wait for the whole queue).

use cubecl::{cube, prelude::*};

/// `grad[k] = grad[k] * g[0]` for every k below `n` (grad's elements, contiguous), or nothing
/// where `g[0]` is 1. Each unit strides by the launch's units, so any cube count is valid; the
/// host launches a few, which cost next to nothing where g is 1.
#[cube(launch_unchecked)]
pub fn scale_unless_one<F: Float>(grad: &mut Tensor<F>, g: &Tensor<F>, n: u32) {
    let s = g[0];
    if s != F::new(1.0) {
        let stride = CUBE_COUNT * CUBE_DIM as usize;
        let mut k = ABSOLUTE_POS;
        while k < n as usize {
            grad[k] = grad[k] * s;
            k += stride;
        }
    }
}
