//! Small-C forward and logits with one unit per row, for large B: X staged through shared
//! memory in tiles of `rows` rows by `depth` vectors, so that each unit sums its row's C dot
//! products alone, in registers, with no plane sums (the cost of `small_classes_forward`'s
//! layout: C plane sums per row). The next tile's loads are issued before the current tile's
//! sums (registers hold them meanwhile). Measured against `small_classes_forward` on the H200
//! in PERF_NOTES.md (change 15); the host runs these kernels from B = 16384 on.
//!
//! X [B, I], W [C, I], b [C]; all contiguous, X and W read as vectors of N elements (N divides
//! I). A cube of `rows` units owns rows `CUBE_POS * rows ..`; for each tile of `depth` vectors
//! of columns, its units load the X tile (consecutive units, consecutive vectors of a row: the
//! loads of a plane are contiguous) and the W tile into shared memory, then unit u adds
//! `x[u][k] * w[c][k]` for the tile's columns k in order, element by element. So each dot
//! product is summed in column order, as stage 1 sums it; the bits depend on nothing but the
//! inputs.
//!
//! Shared memory: X rows padded by one vector (a unit reads its own row: with the pad, the
//! units of a plane hit distinct banks); W not padded (every unit reads the same address: a
//! broadcast).
//!
//! Every access is in bounds by construction (rows past B and columns past I load zeros and
//! write nothing), so the host launches these kernels without bound checks.

use cubecl::{cube, prelude::*};

/// Most classes the register arrays are sized for (the host's small-C bound).
pub const MAX_CLASSES: usize = 32;

/// This unit's `depth` vectors of the X tile at column vector `k0` into `tile` (unit u takes
/// vectors u, u + rows, ... of the cube's tile; zeros past B or I).
#[cube]
fn load_x_tile<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    tile: &mut Array<Vector<F, N>>,
    k0: usize,
    #[comptime] rows: usize,
    #[comptime] depth: usize,
) {
    let batch = x.shape(0);
    let vectors = x.shape(1) / N::value();
    let unit = UNIT_POS as usize;
    let first = CUBE_POS * rows;
    let zero = Vector::<F, N>::empty().fill(F::new(0.0));
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
fn row_dots<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
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
    let mut smem_x = SharedMemory::<Vector<F, N>>::new(rows * (depth + 1));
    let mut smem_w = SharedMemory::<Vector<F, N>>::new(classes * depth);
    let mut tile = Array::<Vector<F, N>>::new(depth);
    #[unroll]
    for c in 0..classes {
        acc[c] = F::new(0.0);
    }
    load_x_tile::<F, N>(x, &mut tile, 0, rows, depth);
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
            load_x_tile::<F, N>(x, &mut tile, k0 + depth, rows, depth);
        }
        // 3. This unit's row: the tile's columns in order.
        #[unroll]
        for k in 0..depth {
            let xv = smem_x[unit * stride + k];
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

/// Stages 1 and 2 for small C, one unit per row: writes Z [B, C], dH [B, C] and the loss per
/// cube (the sum of its rows' losses in row order, `loss` [cubes], which `mean_loss` adds).
/// Stage 2's algebra term by term, on C values in registers. A label outside [0, C) makes its
/// row's loss and dH NaN.
#[cube(launch_unchecked)]
pub fn row_tiles_forward<F: Float, N: Size, L: Int>(
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
    #[comptime] depth: usize,
) {
    let batch = x.shape(0);
    let unit = UNIT_POS as usize;
    let row = CUBE_POS * rows + unit;
    let nan = F::cast_from(nan);
    let inv_batch = F::new(1.0) / F::cast_from(batch);
    let mut acc = Array::<F>::new(classes);
    row_dots::<F, N>(x, w, &mut acc, classes, rows, depth);

    let mut row_loss = F::new(0.0);
    if row < batch {
        let mut m = F::min_value();
        #[unroll]
        for c in 0..classes {
            let pre = acc[c] + b[c];
            z[row * classes + c] = pre;
            let h = select(pre <= F::new(0.0), F::new(0.0), pre);
            acc[c] = h;
            m = F::max(m, h);
        }
        let mut d = F::new(0.0);
        #[unroll]
        for c in 0..classes {
            d += F::exp(acc[c] - m);
        }
        // The label, checked before it is ever compared or used.
        let label = labels[row];
        let valid = label >= L::new(0) && label < L::cast_from(classes);
        let target = select(valid, usize::cast_from(label), 0usize);
        let inv_d = F::new(1.0) / d;
        let mut picked = F::new(0.0);
        #[unroll]
        for c in 0..classes {
            let p = F::exp(acc[c] - m) * inv_d;
            let onehot = select(c == target, F::new(1.0), F::new(0.0));
            dh[row * classes + c] = select(valid, (p - onehot) * inv_batch, nan);
            picked = select(c == target, acc[c], picked);
        }
        row_loss = select(valid, F::ln(d) - (picked - m), nan);
    }

    // The cube's loss: its rows' losses in row order (every unit reaches this barrier).
    let mut smem = SharedMemory::<F>::new(rows);
    smem[unit] = row_loss;
    sync_cube();
    if unit == 0 {
        let mut total = F::new(0.0);
        for r in 0..rows {
            total += smem[r];
        }
        loss[CUBE_POS] = total;
    }
}

/// `H = ReLU(X W^T + b)` for small C, one unit per row, in `row_tiles_forward`'s order (H here
/// is ReLU of its Z, bit for bit).
#[cube(launch_unchecked)]
pub fn row_tiles_logits<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
    #[comptime] depth: usize,
) {
    let batch = x.shape(0);
    let row = CUBE_POS * rows + UNIT_POS as usize;
    let mut acc = Array::<F>::new(classes);
    row_dots::<F, N>(x, w, &mut acc, classes, rows, depth);
    if row < batch {
        #[unroll]
        for c in 0..classes {
            let pre = acc[c] + b[c];
            h[row * classes + c] = select(pre <= F::new(0.0), F::new(0.0), pre);
        }
    }
}
