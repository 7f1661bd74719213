//! Fused forward for a small number of classes: stages 1 and 2 in one kernel, reading each row
//! of X once.
//!
//! X [B, I], W [C, I], b [C], labels [B]; writes Z [B, C], dH [B, C] and the loss: per cube, the
//! sum of its rows' losses (`loss` [cubes], added by `mean_loss`), or with `mean` (a launch of
//! one cube) the batch mean itself (`loss` [1]). H is not written: the backward pass needs Z and
//! dH only. All contiguous; X and W are read as vectors of N elements (N divides I).
//!
//! Layout: one plane (warp) owns `rows` consecutive rows at a time. Lane `l` of the plane walks
//! the vectors `l, l + P, l + 2P, ...` of the row (P = plane size, so each load of the plane is
//! one contiguous segment; `steps` segments are loaded before any is used), keeping `rows * C`
//! partial dot products in registers; every W vector it loads serves all of its rows. A plane
//! sum then gives every lane the C logits of each row, and the stable softmax cross-entropy of
//! stage 2 runs in registers; lane `c` writes class `c` (in turns of P classes).
//!
//! C, `rows` and `steps` are compile-time: the partial sums are an unrolled register array, so
//! this kernel is for small C only (the host uses it up to C = 32). Its algebra is stage 2's,
//! term by term; the dot-product sums run in another order than stage 1's (lane partials, then
//! the plane's fixed tree) and the loss sum in another than `mean_loss`'s over rows (rows in
//! plane order, planes in cube order, cubes by `mean_loss`), which the gates check. The order
//! depends on the shape and the plane size only, so the same inputs give the same bits.
//!
//! Every access is in bounds by construction (rows past B read row B - 1 and write nothing;
//! vectors past the row are skipped), so the host launches it without bound checks.

use cubecl::{cube, prelude::*};

/// Planes per cube the loss partials have room for (the host launches 256 or 512 units: 8 or
/// 16 planes of 32).
pub const MAX_PLANES: usize = 256;

#[cube(launch_unchecked)]
pub fn small_classes_forward<F: Float, N: Size, L: Int>(
    x: &Tensor<Vector<F, N>>,
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
        lane_partials::<F, N>(x, w, first, &mut acc, classes, rows, steps);

        // 2. Per row: the plane's sums, bias, ReLU, then stage 2 on C values in registers.
        #[unroll]
        for r in 0..rows {
            let row = first + r;
            let mut zs = Array::<F>::new(classes);
            let mut hs = Array::<F>::new(classes);
            let mut m = F::min_value();
            #[unroll]
            for c in 0..classes {
                let pre = plane_sum(acc[r * classes + c]) + b[c];
                zs[c] = pre;
                hs[c] = select(pre <= F::new(0.0), F::new(0.0), pre);
                m = F::max(m, hs[c]);
            }
            let mut d = F::new(0.0);
            #[unroll]
            for c in 0..classes {
                d += F::exp(hs[c] - m);
            }
            // The label, checked before it is ever compared or used.
            let label = labels[select(row < batch, row, batch - 1)];
            let valid = label >= L::new(0) && label < L::cast_from(classes);
            let target = select(valid, usize::cast_from(label), 0usize);
            let inv_d = F::new(1.0) / d;
            let mut picked = F::new(0.0);
            #[unroll]
            for c in 0..classes {
                picked = select(c == target, hs[c], picked);
            }
            // Lane l writes classes l, l + P, ...: its logit gathered by selects (no branch per
            // class, so the lanes store side by side).
            let mut c0 = 0;
            while c0 < classes {
                let mine = c0 + lane;
                let zc = pick::<F>(&zs, mine, classes);
                let hc = pick::<F>(&hs, mine, classes);
                if row < batch && mine < classes {
                    let p = F::exp(hc - m) * inv_d;
                    let onehot = select(mine == target, F::new(1.0), F::new(0.0));
                    z[row * classes + mine] = zc;
                    dh[row * classes + mine] = select(valid, (p - onehot) * inv_batch, nan);
                }
                c0 += plane_dim;
            }
            if row < batch {
                plane_loss += select(valid, F::ln(d) - (picked - m), nan);
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

/// `values[mine]` of a register array of C values, gathered by selects (no branch per class,
/// so the lanes of a plane that each pick their own class store side by side); 0 where `mine`
/// is past C. Shared by the small-C forward and logits kernels.
#[cube]
pub fn pick<F: Float>(values: &Array<F>, mine: usize, #[comptime] classes: usize) -> F {
    let mut got = F::new(0.0);
    #[unroll]
    for c in 0..classes {
        got = select(c == mine, values[c], got);
    }
    got
}

/// Lane partials of the `rows * C` dot products of rows `first ..` with the C rows of W, into
/// `acc` (row-major `[rows, C]`), for the plane's current group of rows: lane `l` walks the
/// vectors `l, l + P, ...`, `steps` segments of each row loaded before any is used. Rows past B
/// read row B - 1 (valid memory). Shared by the small-C forward and logits kernels.
#[cube]
pub fn lane_partials<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    first: usize,
    acc: &mut Array<F>,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] steps: usize,
) {
    let batch = x.shape(0);
    let vectors = x.shape(1) / N::value();
    let lane = UNIT_POS_PLANE as usize;
    let plane_dim = PLANE_DIM as usize;
    #[unroll]
    for k in 0..rows * classes {
        acc[k] = F::new(0.0);
    }
    // `steps` segments of each row per pass: every X load of the pass is issued before the
    // first FMA waits on one (loads in flight are what a memory-bound kernel lives on).
    let mut col = lane;
    while col < vectors {
        let mut xs = Array::<Vector<F, N>>::new(rows * steps);
        #[unroll]
        for u in 0..steps {
            let cu = col + u * plane_dim;
            #[unroll]
            for r in 0..rows {
                let row = select(first + r < batch, first + r, batch - 1);
                let mut v = Vector::<F, N>::empty().fill(F::new(0.0));
                if cu < vectors {
                    v = x[row * vectors + cu];
                }
                xs[u * rows + r] = v;
            }
        }
        #[unroll]
        for u in 0..steps {
            let cu = col + u * plane_dim;
            if cu < vectors {
                #[unroll]
                for c in 0..classes {
                    let wv = w[c * vectors + cu];
                    #[unroll]
                    for r in 0..rows {
                        let xv = xs[u * rows + r];
                        #[unroll]
                        for e in 0..N::value() {
                            acc[r * classes + c] += xv[e] * wv[e];
                        }
                    }
                }
            }
        }
        col += steps * plane_dim;
    }
}
