//! The streamed large-C path's kernels: what runs on one chunk of rows between its products,
//! in place on the chunk's product `P = X[rows] W^T` (no f32 [B, C] tensor exists on this path;
//! bf16's whole-batch mode keeps only its rounded dZ for every row).
//!
//! - [`streamed_rows`]: per row, `Z = P + b`, `H = act(Z)`, the loss (the algebra of
//!   [`crate::softmax_ce`]) and `dZ = act'(Z) (softmax(H) - onehot) / B` written over P: the
//!   gradient for a unit upstream gradient, ready for the chunk's `dX` and `dW` products. With
//!   bf16 inputs, P is f32 and dZ is also written rounded to bf16, the operand those products
//!   take; with rounded logits, P is bf16 and dZ is written over it in bf16. The LM terms (a logit scale, a softcap, the z-loss) and the
//!   row's log-sum-exp and entropy are compile-time options of the same kernel.
//! - [`streamed_column_sums`]: `db += column_sum(dZ)`, chunk after chunk, in a fixed order.

use cubecl::{cube, prelude::*};

use crate::activation::{activation, activation_grad};
use crate::reductions::columns::column_total;
use crate::reductions::tree::{tree_argmax, tree_max_sum, tree_sum};
use crate::softmax_ce::{checked_label, row_loss, softmax_grad};

/// `(H, dH/dA)` of one logit `v = s act(Z)` under the softcap: `cap tanh(v / cap)` and
/// `s (1 - tanh^2)`, both from one `e = exp(-2 |v / cap|)`: `tanh = (1 - e) / (1 + e)`, and
/// `1 - tanh^2 = 4 e / (1 + e)^2`, which keeps its digits where a rounded tanh is 1 (`1 - t^2`
/// from it is 0 from |v / cap| of about 9 in f32). Without the softcap, `(v, s)`.
#[cube]
fn capped<F: Float>(v: F, scale: F, cap: F, inv_cap: F, #[comptime] softcap: bool) -> (F, F) {
    let mut h = v;
    let mut slope = scale;
    if softcap {
        let u = v * inv_cap;
        let e = F::exp(F::new(-2.0) * F::abs(u));
        // One division for both (f32's IEEE division is the costliest step here).
        let r = F::new(1.0) / (F::new(1.0) + e);
        let t = (F::new(1.0) - e) * r;
        h = cap * select(u < F::new(0.0), -t, t);
        slope = scale * (F::new(4.0) * e * r * r);
    }
    (h, slope)
}

/// Row `CUBE_POS` of a chunk `p` [n, C], rows `first..first + n` of a batch of `batch` rows:
/// writes `loss[first + row]` and replaces the row of `p` with its dZ. One cube per row of
/// `cube_units` units (a power of two); each unit takes a strided share of the row's vectors
/// of `N` classes (`N` divides C: P, the bias and `dz_half` are read and written `N` elements
/// at a time). The row is read twice: once for the maximum and the sum of exponentials
/// together (online softmax: each unit's sum rescaled whenever its maximum grows, once per
/// vector, the units' pairs merged by a fixed-order tree), once for dZ. Cubes past n leave.
///
/// In place: the first read and the label's value come before the trees, whose barriers every
/// unit passes before writing.
///
/// P is stored as `P`: f32 (`F`), or the inputs' half type where the logits product rounds
/// its sums to it (then dZ is written over P rounded to that type). Every value is computed
/// in `F`. With `half`, `bias` and `dz_half` [n, C] are of the inputs' half type `E`, and
/// each dZ is also written rounded to `E` into `dz_half`; without, `dz_half` is never touched.
///
/// With `weighted`, the row's dZ is scaled by `row_weights[first + row]` where it is by
/// `1 / B` without (the gradient of `sum_r row_weights[r] loss[r]`: class weights, ignored
/// rows, a sum or a per-row upstream gradient); the row's loss is written unweighted either
/// way. Without, `row_weights` is never touched.
///
/// The logits the softmax sees are `H = s act(Z)` (`scale` s, 1 for none: a product by 1 is
/// exact), capped at `cap` where `softcap` ([`capped`]); dZ carries `dH/dA`. With `z_loss`,
/// the gradient of the row's z-term `zeta lse^2` joins dZ. With `weighted`, the z-term has
/// its own row weight `z_weights[first + row]` (it is not class-weighted), the loss written
/// is the cross-entropy's alone, and `stats` is on too (the host adds `zeta lse^2` to the
/// row's loss). Without, the z-term weighs `1 / B` as the rest of the row does, the loss
/// written is `ce + zeta lse^2`, and `z_weights` is never touched. With `stats`,
/// also `lse[first + row]` and `entropy[first + row] = ln d - sum_c e_c (H_c - m) / d`
/// (`e_c = exp(H_c - m)`), the latter a second fixed-order tree after the loss's. Tensors an
/// option leaves off are never touched.
///
/// With `predict`, also `predictions[first + row]` = the row's argmax of `s act(Z)` (the
/// softcap left out: it keeps the order and ties the logits it saturates), the first class of
/// the largest value, found in the first read: each unit keeps the first class of its largest
/// value, and an argmax tree keeps the larger value, then the smaller class. The loss's tree
/// is the same with or without it. Without, `predictions` is never touched.
#[cube(launch_unchecked)]
pub fn streamed_rows<F: Float, E: Float, P: Float, L: Int, N: Size>(
    p: &mut Tensor<Vector<P, N>>,
    bias: &Tensor<Vector<E, N>>,
    labels: &Tensor<L>,
    loss: &mut Tensor<F>,
    predictions: &mut Tensor<L>,
    dz_half: &mut Tensor<Vector<E, N>>,
    row_weights: &Tensor<F>,
    z_weights: &Tensor<F>,
    lse: &mut Tensor<F>,
    entropy: &mut Tensor<F>,
    first: usize,
    batch: usize,
    nan: f32,
    scale: f32,
    cap: f32,
    zeta: f32,
    #[comptime] cube_units: usize,
    #[comptime] relu: bool,
    #[comptime] predict: bool,
    #[comptime] half: bool,
    #[comptime] weighted: bool,
    #[comptime] softcap: bool,
    #[comptime] z_loss: bool,
    #[comptime] stats: bool,
) {
    let rows = p.shape(0);
    let classes = p.shape(1);
    let vectors = classes / N::value();
    let row = CUBE_POS;
    // Uniform over the cube: whole idle cubes leave before any barrier.
    if row >= rows {
        terminate!();
    }
    let base = row * vectors;
    let unit = UNIT_POS as usize;
    let stride = CUBE_DIM as usize;
    let mut smem = SharedMemory::<F>::new(cube_units);
    let (scale, cap) = (F::cast_from(scale), F::cast_from(cap));
    let inv_cap = F::new(1.0) / cap;

    // 1. One pass over the row (online softmax): each unit's maximum of H = cap(s act(P + b))
    //    over its classes and its sum of exponentials relative to that maximum, rescaled as
    //    the maximum grows (once per vector: the vector's largest H first); with `predict`,
    //    also the first class of its largest V = s act(P + b).
    let mut m = F::min_value();
    let mut s = F::new(0.0);
    let mut best = F::min_value();
    let mut at = classes as u32; // none yet
    let mut j = unit;
    while j < vectors {
        let (pv, bv) = (p[base + j], bias[j]);
        let mut hv = Vector::<F, N>::empty().fill(F::new(0.0));
        let mut top = F::min_value();
        #[unroll]
        for e in 0..N::value() {
            let v = activation::<F>(F::cast_from(pv[e]) + F::cast_from(bv[e]), relu) * scale;
            if predict {
                let class = (j * N::value() + e) as u32;
                let take = v > best || at == classes as u32;
                best = select(take, v, best);
                at = select(take, class, at);
            }
            let (h, _) = capped::<F>(v, scale, cap, inv_cap, softcap);
            hv[e] = h;
            // A NaN H leaves the maximum (`max` skips it) and makes the sum NaN.
            top = F::max(top, h);
        }
        let grown = F::max(m, top);
        let mut added = F::new(0.0);
        #[unroll]
        for e in 0..N::value() {
            added += F::exp(hv[e] - grown);
        }
        s = s * F::exp(m - grown) + added;
        m = grown;
        j += stride;
    }

    // 2. The label, checked before it is ever used as an index, and its H, read before any
    //    unit can pass the trees below and overwrite the row.
    let (valid, target) = checked_label::<L>(labels[first + row], L::cast_from(classes));
    let (pv, bv) = (p[base + target / N::value()], bias[target / N::value()]);
    let mut raw = F::new(0.0);
    #[unroll]
    for e in 0..N::value() {
        let here = target % N::value() == e;
        raw = select(here, F::cast_from(pv[e]) + F::cast_from(bv[e]), raw);
    }
    let v = activation::<F>(raw, relu) * scale;
    let (picked, _) = capped::<F>(v, scale, cap, inv_cap, softcap);

    // 3. The row's maximum m of H and denominator d = sum_j exp(H - m), and with `predict` its
    //    class: fixed-order trees over the units' parts.
    let mut predicted = 0u32;
    if predict {
        smem[unit] = best;
        let mut indices = SharedMemory::<u32>::new(cube_units);
        indices[unit] = at;
        let (_, class) = tree_argmax::<F>(&mut smem, &mut indices);
        // No class at all only where every value was below F's lowest (-inf): class 0.
        predicted = select(class < classes as u32, class, 0u32);
    }
    let mut sums = SharedMemory::<F>::new(cube_units);
    smem[unit] = m;
    sums[unit] = s;
    let (m, d) = tree_max_sum::<F>(&mut smem, &mut sums);
    let log_sum_exp = m + F::ln(d);

    // 4. The loss.
    let nan = F::cast_from(nan);
    let zeta = F::cast_from(zeta);
    if unit == 0 {
        let mut l = row_loss::<F>(m, d, picked, valid, nan);
        if z_loss && !weighted {
            l += zeta * log_sum_exp * log_sum_exp;
        }
        loss[first + row] = l;
        if predict {
            predictions[first + row] = L::cast_from(predicted);
        }
        if stats {
            lse[first + row] = log_sum_exp;
        }
    }

    // 5. dZ from the same m and d, over P.
    let inv_d = F::new(1.0) / d;
    let row_scale = if weighted {
        row_weights[first + row]
    } else {
        F::new(1.0) / F::cast_from(batch)
    };
    // The z-term's gradient 2 zeta lse p, times the row's z-weight (`1 / B` unweighted).
    let mut z_scale = F::new(0.0);
    if z_loss {
        let z_weight = if weighted {
            z_weights[first + row]
        } else {
            row_scale
        };
        z_scale = F::new(2.0) * zeta * log_sum_exp * z_weight;
    }
    let mut spread = F::new(0.0); // sum_c e_c (H_c - m), with `stats`
    let mut j = unit;
    while j < vectors {
        let (pv, bv) = (p[base + j], bias[j]);
        let mut dzv = Vector::<F, N>::empty().fill(F::new(0.0));
        #[unroll]
        for e in 0..N::value() {
            let z = F::cast_from(pv[e]) + F::cast_from(bv[e]);
            let (h, slope) = capped::<F>(
                activation::<F>(z, relu) * scale,
                scale,
                cap,
                inv_cap,
                softcap,
            );
            let ex = F::exp(h - m);
            let is_label = j * N::value() + e == target;
            let mut dh = softmax_grad::<F>(ex * inv_d, is_label, valid, row_scale, nan);
            if z_loss {
                dh += z_scale * (ex * inv_d);
            }
            if stats {
                spread += ex * (h - m);
            }
            dzv[e] = activation_grad::<F>(z, dh * slope, relu);
        }
        p[base + j] = Vector::<P, N>::cast_from(dzv);
        if half {
            dz_half[base + j] = Vector::<E, N>::cast_from(dzv);
        }
        j += stride;
    }
    if stats {
        smem[unit] = spread;
        let spread = tree_sum::<F>(&mut smem);
        if unit == 0 {
            entropy[first + row] = F::ln(d) - spread * inv_d;
        }
    }
}

/// `db[c] = column_sum(dZ)[c]` for the first chunk (`accumulate` false), `db[c] += ..` for
/// the next ones; one cube per class of `cube_units` units, cubes past C leave.
#[cube(launch_unchecked)]
pub fn streamed_column_sums<F: Float>(
    dz: &Tensor<F>,
    db: &mut Tensor<F>,
    #[comptime] accumulate: bool,
    #[comptime] cube_units: usize,
) {
    let class = CUBE_POS;
    if class >= dz.shape(1) {
        terminate!();
    }
    let total = column_total::<F>(dz, class, cube_units);
    if UNIT_POS == 0 {
        if accumulate {
            db[class] += total;
        } else {
            db[class] = total;
        }
    }
}
