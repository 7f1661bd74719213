//! The fused small-C forward: stages 1 and 2 in one kernel, reading each row of X once.
//!
//! X [B, I] (of type `E`: f32, or bf16 and f16 widened to `F` as they are loaded), W [C, I],
//! b [C], labels [B]; writes Z [B, C], dH [B, C] and the loss: per cube,
//! the sum of its rows' losses (`loss` [cubes], added by `mean_loss`), or with `mean` (a launch
//! of one cube) the batch mean itself (`loss` [1]). H is not written: the backward pass needs Z
//! and dH only. All contiguous; X and W are read as vectors of N elements (N divides I).
//!
//! Two layouts of the dot products ([`crate::small_classes::dots`]):
//! - [`forward_planes`]: one plane per group of `rows` rows (small and medium B);
//! - [`forward_rows`]: one unit per row, X staged in shared memory (large B).
//!
//! The softmax cross-entropy of each row runs on its C values in registers with the shared
//! algebra ([`crate::softmax_ce`]). The dot-product sums run in another order than stage 1's
//! in `forward_planes` (lane partials, then the plane's tree) and the loss sum in another than
//! `mean_loss`'s over rows, which the gates check. A label outside [0, C) makes its row's loss
//! and dH NaN. Every access is in bounds by construction, so the host launches these kernels
//! without bound checks.

use cubecl::{cube, prelude::*};

use crate::activation::activation;
use crate::small_classes::dots::{lane_partials, pick, plane_logits, row_dots};
use crate::softmax_ce::{checked_label, register_max_sum, row_grad, row_loss};

/// Planes per cube the loss partials have room for. Invariant: at least the planes of the
/// host's largest launch (512 units: 16 planes of 32, or more of smaller planes).
pub const MAX_PLANES: usize = 256;

/// The plane layout: one plane owns `rows` consecutive rows at a time, strided over every plane
/// of the launch; lane `c` writes class `c` (in turns of P classes).
#[cube(launch_unchecked)]
pub fn forward_planes<F: Float, E: Float, N: Size, L: Int>(
    x: &Tensor<Vector<E, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    labels: &Tensor<L>,
    z: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    loss: &mut Tensor<F>,
    nan: f32,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] steps: usize,
    #[comptime] mean: bool,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let lane = UNIT_POS_PLANE as usize;
    let plane_dim = PLANE_DIM as usize;
    let planes_per_cube = (CUBE_DIM / PLANE_DIM) as usize;
    let plane = (UNIT_POS / PLANE_DIM) as usize;
    let total_planes = CUBE_COUNT * planes_per_cube;
    let nan = F::cast_from(nan);
    let inv_batch = F::new(1.0) / F::cast_from(batch);
    // This plane's rows' losses, in row order (lane 0's copy is the one kept).
    let mut plane_loss = F::new(0.0);

    // Groups of `rows` rows, strided over every plane of the launch. The loop bounds are
    // uniform over a plane, so all its lanes reach every plane sum together.
    let mut first = (CUBE_POS * planes_per_cube + plane) * rows;
    while first < batch {
        // 1. Lane partials of the rows * C dot products.
        let mut acc = Array::<F>::new(rows * classes);
        lane_partials::<F, E, N>(x, w, first, &mut acc, classes, rows, steps);

        // 2. Per row: the plane's sums, bias, activation, then the softmax cross-entropy on C values
        //    in registers.
        #[unroll]
        for r in 0..rows {
            let row = first + r;
            let mut zs = Array::<F>::new(classes);
            let mut hs = Array::<F>::new(classes);
            plane_logits::<F>(&acc, b, &mut zs, &mut hs, r, classes, relu);
            let (m, d) = register_max_sum::<F>(&hs, classes);
            // The label, checked before it is ever compared or used.
            let label = labels[select(row < batch, row, batch - 1)];
            let (valid, target) = checked_label::<L>(label, L::cast_from(classes));
            let inv_d = F::new(1.0) / d;
            let picked = pick::<F>(&hs, target, classes);
            // Lane l writes classes l, l + P, ...: its logit gathered by selects (no branch per
            // class, so the lanes store side by side).
            let mut c0 = 0;
            while c0 < classes {
                let mine = c0 + lane;
                let zc = pick::<F>(&zs, mine, classes);
                let hc = pick::<F>(&hs, mine, classes);
                if row < batch && mine < classes {
                    z[row * classes + mine] = zc;
                    dh[row * classes + mine] =
                        row_grad::<F>(hc, m, inv_d, mine == target, valid, inv_batch, nan);
                }
                c0 += plane_dim;
            }
            if row < batch {
                plane_loss += row_loss::<F>(m, d, picked, valid, nan);
            }
        }
        first += total_planes * rows;
    }

    // 3. The cube's loss: its planes' sums in plane order (every unit reaches this barrier).
    let mut smem = SharedMemory::<F>::new(MAX_PLANES);
    if lane == 0 {
        smem[plane] = plane_loss;
    }
    sync_cube();
    if UNIT_POS == 0 {
        let mut total = F::new(0.0);
        for p in 0..planes_per_cube {
            total += smem[p];
        }
        if mean {
            loss[0] = total / F::cast_from(batch);
        } else {
            loss[CUBE_POS] = total;
        }
    }
}

/// The row layout: a cube of `rows` units owns rows `CUBE_POS * rows ..`, one unit per row;
/// the loss per cube is the sum of its rows' losses in row order (`loss` [cubes]).
#[cube(launch_unchecked)]
pub fn forward_rows<F: Float, E: Float, N: Size, L: Int>(
    x: &Tensor<Vector<E, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    labels: &Tensor<L>,
    z: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    loss: &mut Tensor<F>,
    nan: f32,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] depth: usize,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let unit = UNIT_POS as usize;
    let row = CUBE_POS * rows + unit;
    let nan = F::cast_from(nan);
    let inv_batch = F::new(1.0) / F::cast_from(batch);
    let mut acc = Array::<F>::new(classes);
    row_dots::<F, E, N>(x, w, &mut acc, classes, rows, depth);

    let mut row_loss_here = F::new(0.0);
    if row < batch {
        // 1. Bias and activation: Z written, H kept in `acc`.
        #[unroll]
        for c in 0..classes {
            let pre = acc[c] + b[c];
            z[row * classes + c] = pre;
            acc[c] = activation::<F>(pre, relu);
        }
        // 2. The softmax cross-entropy on the C values in registers.
        let (m, d) = register_max_sum::<F>(&acc, classes);
        // The label, checked before it is ever compared or used.
        let (valid, target) = checked_label::<L>(labels[row], L::cast_from(classes));
        let inv_d = F::new(1.0) / d;
        #[unroll]
        for c in 0..classes {
            dh[row * classes + c] =
                row_grad::<F>(acc[c], m, inv_d, c == target, valid, inv_batch, nan);
        }
        let picked = pick::<F>(&acc, target, classes);
        row_loss_here = row_loss::<F>(m, d, picked, valid, nan);
    }

    // 3. The cube's loss: its rows' losses in row order (every unit reaches this barrier).
    let mut smem = SharedMemory::<F>::new(rows);
    smem[unit] = row_loss_here;
    sync_cube();
    if unit == 0 {
        let mut total = F::new(0.0);
        for r in 0..rows {
            total += smem[r];
        }
        loss[CUBE_POS] = total;
    }
}
