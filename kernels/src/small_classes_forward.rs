//! Fused forward for a small number of classes: stages 1 and 2 in one kernel, reading each row
//! of X once.
//!
//! X [B, I], W [C, I], b [C], labels [B]; writes Z [B, C], the per-row loss [B] and dH [B, C]
//! (H is not written: the backward pass needs Z and dH only). All contiguous.
//!
//! Layout: one plane (warp) owns `rows` consecutive rows at a time. Lane `l` of the plane walks
//! the columns `l, l + P, l + 2P, ...` (P = plane size, so each load of the plane is one
//! contiguous segment of a row; STEPS segments are loaded before any is used), keeping `rows * C` partial dot products in registers; every W
//! value it loads serves all of its rows. A plane sum then gives every lane the C logits of each
//! row, and the stable softmax cross-entropy of stage 2 runs in registers.
//!
//! C and `rows` are compile-time: the partial sums are an unrolled register array, so this
//! kernel is for small C only (the host uses it up to C = 32). Its algebra is stage 2's, term by
//! term; only the order of the dot-product sums differs from stage 1 (lane partials, then the
//! plane's fixed tree), which the gates check.

use cubecl::{cube, prelude::*};

/// Plane-wide segments of each row loaded per pass of the column loop.
const STEPS: usize = 4;

#[cube(launch)]
pub fn small_classes_forward<F: Float, L: Int>(
    x: &Tensor<F>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    labels: &Tensor<L>,
    z: &mut Tensor<F>,
    loss: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    nan: f32,
    #[comptime] classes: usize,
    #[comptime] rows: usize,
) {
    let batch = x.shape(0);
    let inputs = x.shape(1);
    let lane = UNIT_POS_PLANE as usize;
    let plane_dim = PLANE_DIM as usize;
    let planes_per_cube = (CUBE_DIM / PLANE_DIM) as usize;
    let plane = (UNIT_POS / PLANE_DIM) as usize;
    let total_planes = CUBE_COUNT * planes_per_cube;
    let nan = F::cast_from(nan);
    let inv_batch = F::new(1.0) / F::cast_from(batch);

    // Groups of `rows` rows, strided over every plane of the launch. The loop bounds are
    // uniform over a plane, so all its lanes reach every plane sum together.
    let mut first = (CUBE_POS * planes_per_cube + plane) * rows;
    while first < batch {
        // 1. Lane partials of the rows * C dot products. Rows past B read row B - 1 (valid
        //    memory) and are never written.
        let mut acc = Array::<F>::new(rows * classes);
        #[unroll]
        for k in 0..rows * classes {
            acc[k] = F::new(0.0);
        }
        // STEPS segments of each row per pass: every X load of the pass is issued before the
        // first FMA waits on one (loads in flight are what a memory-bound kernel lives on).
        let mut col = lane;
        while col < inputs {
            let mut xs = Array::<F>::new(rows * STEPS);
            #[unroll]
            for u in 0..STEPS {
                let cu = col + u * plane_dim;
                #[unroll]
                for r in 0..rows {
                    let row = select(first + r < batch, first + r, batch - 1);
                    let mut v = F::new(0.0);
                    if cu < inputs {
                        v = x[row * inputs + cu];
                    }
                    xs[u * rows + r] = v;
                }
            }
            #[unroll]
            for u in 0..STEPS {
                let cu = col + u * plane_dim;
                if cu < inputs {
                    #[unroll]
                    for c in 0..classes {
                        let wv = w[c * inputs + cu];
                        #[unroll]
                        for r in 0..rows {
                            acc[r * classes + c] += xs[u * rows + r] * wv;
                        }
                    }
                }
            }
            col += STEPS * plane_dim;
        }

        // 2. Per row: the plane's sums, bias, ReLU, then stage 2 on C values in registers.
        #[unroll]
        for r in 0..rows {
            let row = first + r;
            let mut zs = Array::<F>::new(classes);
            let mut m = F::min_value();
            #[unroll]
            for c in 0..classes {
                let pre = plane_sum(acc[r * classes + c]) + b[c];
                zs[c] = pre;
                let hc = select(pre <= F::new(0.0), F::new(0.0), pre);
                m = F::max(m, hc);
            }
            let mut d = F::new(0.0);
            #[unroll]
            for c in 0..classes {
                let hc = select(zs[c] <= F::new(0.0), F::new(0.0), zs[c]);
                d += F::exp(hc - m);
            }
            if row < batch && lane == 0 {
                // The label, checked before it is ever compared or used.
                let label = labels[row];
                let valid = label >= L::new(0) && label < L::cast_from(classes);
                let target = select(valid, usize::cast_from(label), 0usize);
                let inv_d = F::new(1.0) / d;
                let mut picked = F::new(0.0);
                #[unroll]
                for c in 0..classes {
                    let hc = select(zs[c] <= F::new(0.0), F::new(0.0), zs[c]);
                    picked = select(c == target, hc, picked);
                    let p = F::exp(hc - m) * inv_d;
                    let onehot = select(c == target, F::new(1.0), F::new(0.0));
                    z[row * classes + c] = zs[c];
                    dh[row * classes + c] = select(valid, (p - onehot) * inv_batch, nan);
                }
                loss[row] = select(valid, F::ln(d) - (picked - m), nan);
            }
        }
        first += total_planes * rows;
    }
}
