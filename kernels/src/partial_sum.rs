//! `partial_sum`: `out[n] = sum_p part[p, n]` in a fixed order (`strided_sum`), for the
//! per-chunk partial gradients of `small_classes_backward` and the split-K partials of
//! `tiled_matmul`.
//!
//! part [P, N] and out [N], contiguous; one unit per output element, so consecutive units read
//! consecutive addresses. P = 0 writes zeros (the gradient of an empty batch).

use cubecl::{cube, prelude::*};

use crate::tree::strided_sum;

#[cube(launch)]
pub fn partial_sum<F: Float>(part: &Tensor<F>, out: &mut Tensor<F>) {
    let n = ABSOLUTE_POS;
    if n >= out.len() {
        terminate!();
    }
    let width = out.len();
    let parts = part.len() / width;
    out[n] = strided_sum::<F>(part, n, width, parts);
}
