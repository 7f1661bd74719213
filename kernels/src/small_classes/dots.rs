//! The dot products of the small-C kernels: each row of X against the C rows of W, in one of
//! two layouts, and the per-row logits `Z = X W^T + b`, `H = act(Z)` from them.
//!
//! X [B, I], W [C, I], b [C]; all contiguous, X and W read as vectors of N elements (N divides
//! I). X is of type `E` (the inputs' float: f32, or bf16 and f16, widened to `F` where it is
//! summed; the row layout keeps it in its type in registers and shared memory), everything
//! else of `F`. C and the row counts are compile-time: the partial sums are unrolled register arrays,
//! so these helpers are for small C only (the host uses them up to C = 32).
//!
//! - Planes ([`lane_partials`], then [`plane_logits`]): one plane owns `rows` consecutive rows
//!   at a time. Lane `l` walks the vectors `l, l + P, l + 2P, ...` of the row (P = plane size,
//!   so each load of the plane is one contiguous segment; `steps` segments are loaded before
//!   any is used), keeping `rows * C` partial dot products in registers; every W vector it
//!   loads serves all of its rows. A plane sum then gives every lane the C logits of each row.
//!   The order: lane partials, then the plane's fixed tree.
//! - Rows ([`row_dots`]): one unit per row, X staged through shared memory in tiles of `rows`
//!   rows by `depth` vectors, so that each unit sums its row's C dot products alone, in
//!   registers, with no plane sums (C plane sums per row is the cost of the planes' layout at
//!   large B). The next tile's loads are issued before the current tile's sums. Each dot
//!   product is summed in column order, as stage 1 sums it. Shared memory: X rows padded by one
//!   vector (a unit reads its own row: with the pad, the units of a plane hit distinct banks);
//!   W not padded (every unit reads the same address: a broadcast).
//!
//! The orders depend on the shape and the plane size only, so the same inputs give the same
//! bits. Every access is in bounds by construction (rows past B read row B - 1 or zeros and
//! write nothing; vectors past the row are skipped or zero).

use cubecl::{cube, prelude::*};

use crate::activation::activation;

/// Lane partials of the `rows * C` dot products of rows `first ..` with the C rows of W, into
/// `acc` (row-major `[rows, C]`), for the plane's current group of rows: lane `l` walks the
/// vectors `l, l + P, ...`, `steps` segments of each row loaded before any is used. Rows past B
/// read row B - 1 (valid memory).
#[cube]
pub fn lane_partials<F: Float, E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
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
                    v = Vector::<F, N>::cast_from(x[row * vectors + cu]);
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

/// Row `r` of the plane's group: the plane sums of `acc` (from [`lane_partials`]) plus the
/// bias into `zs` (Z), and their activation into `hs` (H), C values each, in every lane.
#[cube]
pub fn plane_logits<F: Float>(
    acc: &Array<F>,
    b: &Tensor<F>,
    zs: &mut Array<F>,
    hs: &mut Array<F>,
    r: usize,
    #[comptime] classes: usize,
    #[comptime] relu: bool,
) {
    #[unroll]
    for c in 0..classes {
        let pre = plane_sum(acc[r * classes + c]) + b[c];
        zs[c] = pre;
        hs[c] = activation::<F>(pre, relu);
    }
}

/// `values[mine]` of a register array of C values, gathered by selects (no branch per class,
/// so the lanes of a plane that each pick their own class store side by side); 0 where `mine`
/// is past C.
#[cube]
pub fn pick<F: Float>(values: &Array<F>, mine: usize, #[comptime] classes: usize) -> F {
    let mut got = F::new(0.0);
    #[unroll]
    for c in 0..classes {
        got = select(c == mine, values[c], got);
    }
    got
}

/// This unit's `depth` vectors of the X tile at column vector `k0` into `tile`, in X's own
/// type (unit u takes vectors u, u + rows, ... of the cube's tile; zeros past B or I).
#[cube]
pub fn load_x_tile<E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    tile: &mut Array<Vector<E, N>>,
    k0: usize,
    #[comptime] rows: usize,
    #[comptime] depth: usize,
) {
    let batch = x.shape(0);
    let vectors = x.shape(1) / N::value();
    let unit = UNIT_POS as usize;
    let first = CUBE_POS * rows;
    let zero = Vector::<E, N>::empty().fill(E::new(0.0));
    #[unroll]
    for t in 0..depth {
        let j = unit + t * rows;
        let row = first + j / depth;
        let k = j % depth;
        let mut v = zero;
        if row < batch && k0 + k < vectors {
            v = x[row * vectors + k0 + k];
        }
        tile[t] = v;
    }
}

/// The C logits `X[row] W^T` (without bias) of this unit's row into `acc`. Every unit of the
/// cube must call it (it has barriers). The next X tile's loads are issued before the current
/// tile's sums (registers hold it meanwhile).
#[cube]
pub fn row_dots<F: Float, E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    w: &Tensor<Vector<F, N>>,
    acc: &mut Array<F>,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] depth: usize,
) {
    let vectors = x.shape(1) / N::value();
    let unit = UNIT_POS as usize;
    let zero = Vector::<F, N>::empty().fill(F::new(0.0));
    let stride = depth + 1;
    // X in its own type in registers and shared memory, widened as each unit reads its row.
    let mut smem_x = SharedMemory::<Vector<E, N>>::new(rows * (depth + 1));
    let mut smem_w = SharedMemory::<Vector<F, N>>::new(classes * depth);
    let mut tile = Array::<Vector<E, N>>::new(depth);
    #[unroll]
    for c in 0..classes {
        acc[c] = F::new(0.0);
    }
    load_x_tile::<E, N>(x, &mut tile, 0, rows, depth);
    let mut k0 = 0;
    // Uniform over the cube: every unit meets every barrier.
    while k0 < vectors {
        // 1. The X tile (loaded before the previous tile's sums).
        #[unroll]
        for t in 0..depth {
            let j = unit + t * rows;
            smem_x[(j / depth) * stride + j % depth] = tile[t];
        }
        // 2. The W tile.
        let mut e = unit;
        while e < classes * depth {
            let c = e / depth;
            let k = e % depth;
            let mut v = zero;
            if k0 + k < vectors {
                v = w[c * vectors + k0 + k];
            }
            smem_w[e] = v;
            e += rows;
        }
        sync_cube();
        // The next X tile's loads, in flight during this tile's sums.
        if k0 + depth < vectors {
            load_x_tile::<E, N>(x, &mut tile, k0 + depth, rows, depth);
        }
        // 3. This unit's row: the tile's columns in order.
        #[unroll]
        for k in 0..depth {
            let xv = Vector::<F, N>::cast_from(smem_x[unit * stride + k]);
            #[unroll]
            for c in 0..classes {
                let wv = smem_w[c * depth + k];
                #[unroll]
                for n in 0..N::value() {
                    acc[c] += xv[n] * wv[n];
                }
            }
        }
        // Nobody overwrites the tiles before every unit is done with them.
        sync_cube();
        k0 += depth;
    }
}
