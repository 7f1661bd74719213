//! The head's output alone for a small number of classes: `H = ReLU(X W^T + b)`, reading each
//! row of X once (prediction; no labels, no loss).
//!
//! X [B, I], W [C, I], b [C]; writes H [B, C]. All contiguous; X and W are read as vectors of N
//! elements (N divides I). The layout is `small_classes_forward`'s, with the same lane partials
//! ([`lane_partials`]): one plane owns `rows` consecutive rows at a time, a plane sum gives every
//! lane the C logits of each row, and lane `c` writes class `c` (in turns of P classes).
//! The dot products are summed in that kernel's order, so H here is ReLU of its Z, bit for bit.
//!
//! Every access is in bounds by construction (rows past B read row B - 1 and write nothing),
//! so the host launches it without bound checks.

use cubecl::{cube, prelude::*};

use crate::small_classes_forward::{lane_partials, pick};

#[cube(launch_unchecked)]
pub fn small_classes_logits<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] steps: usize,
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
        lane_partials::<F, N>(x, w, first, &mut acc, classes, rows, steps);
        #[unroll]
        for r in 0..rows {
            let row = first + r;
            let mut hs = Array::<F>::new(classes);
            #[unroll]
            for c in 0..classes {
                let pre = plane_sum(acc[r * classes + c]) + b[c];
                hs[c] = select(pre <= F::new(0.0), F::new(0.0), pre);
            }
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
