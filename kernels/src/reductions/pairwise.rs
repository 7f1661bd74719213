//! The sum of a vector in the fixed pairwise order of the crate's stock-op sums
//! (`src/pairwise.rs`, the cross-entropy options' reductions), in one launch where the stock
//! ops take one or two per level.
//!
//! values [n] (n >= 1), scratch [n], out [1]. Level after level, element k of the first half
//! plus element k of the second half (first + second, as the stock ops add them), an odd
//! length carrying its last element to the next level, until one is left: `ceil(log2 n)`
//! levels of single f32 additions, so the bits are those of the stock ops on every backend.
//! One cube: the values are copied to the scratch, each level is computed in place there
//! (unit u takes k = u, u + CUBE_DIM, ...) and `sync_storage` separates the levels (the
//! scratch is global memory: `sync_cube` orders only shared memory on Vulkan and WebGPU;
//! both are `__syncthreads` on CUDA). In place is
//! safe: a level writes indices below `half` only, each index by the one unit that reads it,
//! and reads the upper half, which nobody writes; the odd carry writes index `half`, which
//! only the unit of k = 0 reads, after that unit's own pair.

use cubecl::{cube, prelude::*};

#[cube(launch_unchecked)]
pub fn pairwise_sum<F: Float>(values: &Tensor<F>, scratch: &mut Tensor<F>, out: &mut Tensor<F>) {
    let unit = UNIT_POS as usize;
    let stride = CUBE_DIM as usize;
    let mut n = values.shape(0);

    let mut k = unit;
    while k < n {
        scratch[k] = values[k];
        k += stride;
    }
    sync_storage();

    while n > 1 {
        let half = n / 2;
        let mut k = unit;
        while k < half {
            scratch[k] = scratch[k] + scratch[k + half];
            k += stride;
        }
        if unit == 0 && n % 2 == 1 {
            scratch[half] = scratch[2 * half];
        }
        // Every unit must see this level before the next reads it.
        sync_storage();
        n = half + n % 2;
    }
    if unit == 0 {
        out[0] = scratch[0];
    }
}
