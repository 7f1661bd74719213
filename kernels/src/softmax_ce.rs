//! The row softmax cross-entropy algebra, written once: every kernel that computes a row's loss
//! and its dH calls these helpers (stage 2 of the stage kernels, the large-C rows and both small-C
//! forwards).
//!
//! For one row h [C] with label y, m = max_j h[j] and d = sum_j exp(h[j] - m):
//!   p[c]  = exp(h[c] - m) / d
//!   loss  = ln(d) - (h[y] - m)              (= -ln p[y], without forming p[y])
//!   dH[c] = (p[c] - onehot(y)[c]) / B       (the gradient of the batch mean)
//! Subtracting m changes no probability and keeps every exponent <= 0, so no exp overflows;
//! the largest term of d is exp(0) = 1, so d >= 1 and ln(d) is finite.
//!
//! A label outside [0, C) is never used as an index: [`checked_label`] maps it to class 0 and
//! says it is invalid, and that row's loss and dH are NaN, so the mean loss and every gradient
//! become NaN instead of silently wrong. `nan` arrives as a launch argument: CUDA's code
//! generator has no NaN literal.

use cubecl::{cube, prelude::*};

use crate::reductions::tree::{tree_max, tree_sum};

/// `(valid, target)`: whether `label` is in `[0, classes)`, and the class to index with (the
/// label, or 0 for an invalid one). `classes` is C cast to the label type by the caller.
#[cube]
pub fn checked_label<L: Int>(label: L, classes: L) -> (bool, usize) {
    let valid = label >= L::new(0) && label < classes;
    (valid, select(valid, usize::cast_from(label), 0usize))
}

/// The row's loss `ln(d) - (h[y] - m)`, `picked` being `h[y]`; NaN for an invalid label.
#[cube]
pub fn row_loss<F: Float>(m: F, d: F, picked: F, valid: bool, nan: F) -> F {
    select(valid, F::ln(d) - (picked - m), nan)
}

/// One element of the row's `dH = (p - onehot) / B`, from the row's `m` and `inv_d = 1 / d`;
/// `is_label` says whether this class is the label. NaN for an invalid label.
#[cube]
pub fn row_grad<F: Float>(
    h: F,
    m: F,
    inv_d: F,
    is_label: bool,
    valid: bool,
    inv_batch: F,
    nan: F,
) -> F {
    softmax_grad::<F>(F::exp(h - m) * inv_d, is_label, valid, inv_batch, nan)
}

/// [`row_grad`] from the class's probability `p`: `(p - onehot) scale`, NaN for an invalid
/// label.
#[cube]
pub fn softmax_grad<F: Float>(p: F, is_label: bool, valid: bool, scale: F, nan: F) -> F {
    let onehot = select(is_label, F::new(1.0), F::new(0.0));
    select(valid, (p - onehot) * scale, nan)
}

/// `(m, d)` of C values held in registers, summed in class order (the small-C kernels).
#[cube]
pub fn register_max_sum<F: Float>(hs: &Array<F>, #[comptime] classes: usize) -> (F, F) {
    let mut m = F::min_value();
    #[unroll]
    for c in 0..classes {
        m = F::max(m, hs[c]);
    }
    let mut d = F::new(0.0);
    #[unroll]
    for c in 0..classes {
        d += F::exp(hs[c] - m);
    }
    (m, d)
}

/// Row `CUBE_POS` of H [B, C] in global memory, one cube per row: writes `loss[row]` and the
/// row of dH. Each unit takes a strided slice of the row; the maximum and the sum of
/// exponentials are combined by fixed-order trees in shared memory (`cube_units` slots, the
/// cube's size, a power of two). Whole cubes past B leave at once.
///
/// `F::max` of a NaN and a number may return the number (CUDA's `fmaxf`), so a NaN in the row
/// does not come out of the maximum; the sum of exponentials carries it instead.
#[cube]
pub fn softmax_cross_entropy_row<F: Float, L: Int>(
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
    let (valid, target) = checked_label::<L>(labels[row], L::cast_from(classes));
    let nan = F::cast_from(nan);

    // 4. The loss.
    if unit == 0 {
        loss[row] = row_loss::<F>(m, d, h[base + target], valid, nan);
    }

    // 5. dH from the same m and d.
    let inv_d = F::new(1.0) / d;
    let inv_batch = F::new(1.0) / F::cast_from(batch);
    let mut j = unit;
    while j < classes {
        dh[base + j] = row_grad::<F>(h[base + j], m, inv_d, j == target, valid, inv_batch, nan);
        j += stride;
    }
}
