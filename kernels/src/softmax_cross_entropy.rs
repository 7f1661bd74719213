//! Stage 2, `softmax_cross_entropy`: per-row loss and `dH` from the same probabilities.
//!
//! H [B, C] contiguous, labels [B], loss [B], dH [B, C]. One cube per row.
//!
//! Stable algebra, with m = max_j H[r, j] and d = sum_j exp(H[r, j] - m):
//!   p[c]    = exp(H[r, c] - m) / d
//!   loss[r] = ln(d) - (H[r, label] - m)
//!   dH[r,c] = (p[c] - onehot(label)[c]) / B
//! Subtracting m changes no probability and keeps every exponent <= 0, so no exp overflows.
//!
//! A label outside [0, C) is never used as an index: that row gets a NaN loss and a NaN dH row,
//! so the mean loss and every gradient become NaN instead of silently wrong. The host passes
//! `nan = f32::NAN` (a runtime argument, since CUDA's code generator has no NaN literal).

use cubecl::{cube, prelude::*};

use crate::tree::{tree_max, tree_sum};

#[cube(launch)]
pub fn softmax_cross_entropy<F: Float, L: Int>(
    h: &Tensor<F>,
    labels: &Tensor<L>,
    loss: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    nan: f32,
    #[comptime] cube_units: usize,
) {
    let batch = h.shape(0);
    let classes = h.shape(1);
    let row = CUBE_POS;
    // Uniform over the cube: whole idle cubes leave before any barrier.
    if row >= batch {
        terminate!();
    }
    let base = row * classes;
    let unit = UNIT_POS as usize;
    let stride = CUBE_DIM as usize;
    let mut smem = SharedMemory::<F>::new(cube_units);

    // 1. Row maximum: a strided partial per unit, then the tree.
    let mut m = F::min_value();
    let mut j = unit;
    while j < classes {
        m = F::max(m, h[base + j]);
        j += stride;
    }
    smem[unit] = m;
    let m = tree_max::<F>(&mut smem);

    // 2. Denominator d = sum_j exp(H - m), same fixed order.
    let mut s = F::new(0.0);
    let mut j = unit;
    while j < classes {
        s += F::exp(h[base + j] - m);
        j += stride;
    }
    smem[unit] = s;
    let d = tree_sum::<F>(&mut smem);

    // 3. The label, checked before it is ever used as an index.
    let label = labels[row];
    let valid = label >= L::new(0) && label < L::cast_from(classes);
    let target = select(valid, usize::cast_from(label), 0usize);
    // NaN arrives as a launch argument: CUDA's code generator has no NaN literal.
    let nan = F::cast_from(nan);

    // 4. Loss: ln(d) - (H[label] - m).
    if unit == 0 {
        let row_loss = F::ln(d) - (h[base + target] - m);
        loss[row] = select(valid, row_loss, nan);
    }

    // 5. dH = (p - onehot) / B, from the same m and d.
    let inv_d = F::new(1.0) / d;
    let inv_batch = F::new(1.0) / F::cast_from(batch);
    let mut j = unit;
    while j < classes {
        let p = F::exp(h[base + j] - m) * inv_d;
        let onehot = select(j == target, F::new(1.0), F::new(0.0));
        dh[base + j] = select(valid, (p - onehot) * inv_batch, nan);
        j += stride;
    }
}
