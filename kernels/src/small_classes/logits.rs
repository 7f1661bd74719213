//! The head's output alone for small C: `H = act(X W^T + b)`, reading each row of X once
//! (prediction; no labels, no loss).
//!
//! X [B, I], W [C, I], b [C]; writes H [B, C]. All contiguous; X and W are read as vectors of N
//! elements (N divides I). The two layouts are the forward's ([`crate::small_classes::forward`])
//! with the same dot products in the same order, so H here is the activation of the training forward's
//! Z, bit for bit. Every access is in bounds by construction, so the host launches these
//! kernels without bound checks.

use cubecl::{cube, prelude::*};

use crate::activation::activation;
use crate::small_classes::dots::{lane_partials, pick, plane_logits, row_dots};

/// The plane layout of `forward_planes`: lane `c` writes class `c` (in turns of P classes).
#[cube(launch_unchecked)]
pub fn logits_planes<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] steps: usize,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let lane = UNIT_POS_PLANE as usize;
    let plane_dim = PLANE_DIM as usize;
    let planes_per_cube = (CUBE_DIM / PLANE_DIM) as usize;
    let plane = (UNIT_POS / PLANE_DIM) as usize;
    let total_planes = CUBE_COUNT * planes_per_cube;

    // Groups of `rows` rows, strided over every plane of the launch (uniform loop bounds over a
    // plane, so all its lanes reach every plane sum together).
    let mut first = (CUBE_POS * planes_per_cube + plane) * rows;
    while first < batch {
        let mut acc = Array::<F>::new(rows * classes);
        lane_partials::<F, F, N>(x, w, first, &mut acc, classes, rows, steps);
        #[unroll]
        for r in 0..rows {
            let row = first + r;
            let mut zs = Array::<F>::new(classes);
            let mut hs = Array::<F>::new(classes);
            plane_logits::<F>(&acc, b, &mut zs, &mut hs, r, classes, relu);
            let mut c0 = 0;
            while c0 < classes {
                let mine = c0 + lane;
                let hc = pick::<F>(&hs, mine, classes);
                if row < batch && mine < classes {
                    h[row * classes + mine] = hc;
                }
                c0 += plane_dim;
            }
        }
        first += total_planes * rows;
    }
}

/// The row layout of `forward_rows`: one unit per row.
#[cube(launch_unchecked)]
pub fn logits_rows<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] depth: usize,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let row = CUBE_POS * rows + UNIT_POS as usize;
    let mut acc = Array::<F>::new(classes);
    row_dots::<F, F, N>(x, w, &mut acc, classes, rows, depth);
    if row < batch {
        #[unroll]
        for c in 0..classes {
            h[row * classes + c] = activation::<F>(acc[c] + b[c], relu);
        }
    }
}
