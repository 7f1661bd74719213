//! The row algebra of the cross-entropy options ([`HeadOptions`]) in stock Burn ops, on any
//! backend: which rows are ignored and their weights, each row's loss and its gradient on a
//! materialized `[B, C]`, and the reductions. The derivation, for row r with target y,
//! `p = softmax(H[r])`, class weights w and smoothing e:
//!
//! ```text
//! L[r]        = (1 - e) w[y] (-lp[y]) + (e / C) sum_c w[c] (-lp[c])
//! dL[r]/dH[r] = (1 - e) w[y] (p - onehot(y)) + (e / C) (sum_c w[c] p - w)
//! ```
//!
//! Without smoothing, `dL[r]/dH[r] = w[y] (p - onehot(y))`: the unweighted row gradient scaled
//! by one number per row. That is what the streamed path (C > 32 on the CubeCL backends) runs,
//! with a row weight `rho[r]` in its row kernel (`w[y] / sum w` for the mean, `w[y]` for the
//! sum, `w[y] g[r]` for the backward step of `none`), and the LM terms of [`RowTerms`] (a
//! logit scale and softcap on H, `zeta lse^2` added to L, whose gradient has its own row
//! weight) and the per-row statistics. Label smoothing needs every class's weight in the row,
//! so it runs the materialized path ([`row_losses`]).

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Bool, DType, Int, Tensor, TensorData, TensorPrimitive};

use crate::FusedHeadBackend;
use crate::options::{HeadActivation, HeadOptions, HeadReduction, RowTerms};
use crate::pairwise;

/// The per-row terms of a batch's labels under [`HeadOptions`], on the labels' device, in the
/// dtype the losses are summed in ([`sums_dtype`]).
#[derive(Debug, Clone)]
pub(crate) struct Rows<B: Backend> {
    /// The labels with every ignored row's mapped to class 0 (so a kernel reads an index in
    /// range there); a label outside `[0, C)` that is not ignored stays as it is.
    pub labels: Tensor<B, 1, Int>,
    /// `w[y]` per row (1 without class weights), 0 for an ignored row, NaN for a label
    /// outside `[0, C)` that is not ignored.
    pub weight: Tensor<B, 1>,
    /// Which rows are ignored.
    pub ignored: Tensor<B, 1, Bool>,
    /// 0 for an ignored row, else 1.
    pub keep: Tensor<B, 1>,
}

/// What [`FusedHeadBackend::head_row_losses`](crate::FusedHeadBackend::head_row_losses)
/// gives back.
#[derive(Debug, Clone)]
pub struct HeadRowLosses<B: Backend> {
    /// The per-row losses `L` `[B]` (f32, or f64 for f64 inputs).
    pub losses: FloatTensor<B>,
    /// Their gradients `G = dL[r]/dA[r]` `[B, C]` of `A = act(Z)`, in Z's dtype.
    pub gradients: FloatTensor<B>,
    /// Where asked for, each row's statistics.
    pub token_stats: Option<HeadTokenStats<B>>,
}

/// Each row's statistics of the logits H the softmax sees, `[B]` each (f32, or f64 for f64
/// inputs), from the pass that computes the loss.
#[derive(Debug, Clone)]
pub struct HeadTokenStats<B: Backend> {
    /// `lse[r] = log sum_c exp(H[r, c])`.
    pub log_sum_exp: FloatTensor<B>,
    /// `log softmax(H[r])[y_r]`, the log-probability of the row's target (0 for an ignored
    /// row).
    pub target_log_prob: FloatTensor<B>,
    /// `-sum_c p[c] log p[c]`, `p = softmax(H[r])`: the entropy of the row's distribution.
    pub entropy: FloatTensor<B>,
}

/// f64 for f64 inputs, else f32: the dtype of the per-row losses and their sums (the
/// half-precision inputs' losses are summed in f32, as the op's own).
pub(crate) fn sums_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// [`Rows`] of `labels` `[B]` for C = `classes`.
pub(crate) fn rows<B: Backend>(
    labels: IntTensor<B>,
    loss: &HeadOptions,
    classes: usize,
    dtype: DType,
) -> Rows<B> {
    let labels = Tensor::<B, 1, Int>::from_primitive(labels); // [B]
    let device = labels.device();
    let batch = labels.dims()[0];
    let tokens = loss.pad_tokens.iter().flatten().map(|&t| t as i64);
    let ignored = loss
        .ignore_index
        .into_iter()
        .chain(tokens)
        .map(|value| labels.clone().equal_elem(value))
        .reduce(|a, b| a.bool_or(b))
        .unwrap_or_else(|| labels.clone().equal(labels.clone()).bool_not()); // [B], none
    let outside = labels
        .clone()
        .lower_elem(0)
        .bool_or(labels.clone().greater_equal_elem(classes as i64));
    let invalid = outside.clone().bool_and(ignored.clone().bool_not());
    let labels = labels.mask_fill(ignored.clone(), 0); // [B]
    let weight = match &loss.class_weights {
        Some(w) => {
            let w = Tensor::<B, 1>::from_data(
                TensorData::new(w.clone(), [classes]).convert_dtype(dtype),
                (&device, dtype),
            ); // [C]
            w.gather(0, labels.clone().mask_fill(outside, 0))
        }
        None => Tensor::<B, 1>::ones([batch], (&device, dtype)),
    }; // [B]
    let weight = weight
        .mask_fill(ignored.clone(), 0)
        .mask_fill(invalid, f64::NAN);
    let keep = Tensor::<B, 1>::ones([batch], (&device, dtype)).mask_fill(ignored.clone(), 0);
    Rows {
        labels,
        weight,
        ignored,
        keep,
    }
}

/// The default of [`FusedHeadBackend::head_row_losses`](crate::FusedHeadBackend::head_row_losses), in stock ops: the loss rows `L`
/// `[B]` (in [`sums_dtype`]) and their gradients `G = dL[r]/dA[r]` `[B, C]` (in Z's dtype) of
/// `A = act(Z)`, the algebra of this module's documentation with the logit terms of
/// [`RowTerms`]; with `terms.token_stats`, each row's log-sum-exp, log-probability of its
/// target and entropy `[B]` (in [`sums_dtype`]). `labels`, `row_weight` (`w[y]`) and `keep` (0
/// for an ignored row, else 1) are [`Rows`]'s; `class_weights` `[C]` is [`HeadOptions`]'s. An
/// ignored row's L is 0 and its G is 0 (NaN where its logits are not finite, as PyTorch's);
/// a row whose label is outside `[0, C)` (not ignored: its weight is NaN) gets NaN in both.
pub(crate) fn row_losses<B: Backend>(
    z: FloatTensor<B>,
    labels: IntTensor<B>,
    [row_weight, keep]: [FloatTensor<B>; 2],
    class_weights: Option<FloatTensor<B>>,
    terms: RowTerms,
) -> HeadRowLosses<B> {
    let float1 = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
    let z = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(z)); // [B, C]
    let z_dtype = z.dtype();
    let dtype = sums_dtype(z_dtype);
    let z = z.cast(dtype);
    let scale = terms.logit_scale as f64;
    let (h, dh_da) = logits_seen(z, terms); // [B, C] each
    let classes = h.dims()[1];
    let device = h.device();
    let e = terms.smoothing as f64;
    let w_y = float1(row_weight).unsqueeze_dim::<2>(1); // [B, 1]
    let invalid = w_y.clone().is_nan(); // [B, 1]: a target outside [0, C), not ignored
    let keep = float1(keep).unsqueeze_dim::<2>(1); // [B, 1]
    let ignored = keep.clone().equal_elem(0); // [B, 1]
    let target = Tensor::<B, 1, Int>::from_primitive(labels)
        .unsqueeze_dim::<2>(1)
        .mask_fill(invalid.clone(), 0); // [B, 1], every index in range

    let RowSoftmax {
        max,
        shifted,
        d,
        p,
        grad,
    } = row_softmax(h, target.clone());
    let log_d = d.log(); // [B, 1]
    let picked = shifted.clone().gather(1, target); // [B, 1], H[y] - m <= 0
    let nll = log_d.clone() - picked.clone(); // [B, 1]
    let mut l = nll * w_y.clone() * (1.0 - e); // [B, 1]
    let mut g = grad * w_y * (1.0 - e); // [B, C]
    if e > 0.0 {
        // The smoothing term of every row not ignored: (e / C) sum_c w[c] (-lp[c]).
        let w = match class_weights {
            Some(w) => float1(w).cast(dtype),
            None => Tensor::<B, 1>::ones([classes], (&device, dtype)),
        }; // [C]
        let total = pairwise::sum(w.clone()).unsqueeze_dim::<2>(1); // [1, 1]
        let w = w.unsqueeze_dim::<2>(0); // [1, C]
        let smooth =
            log_d.clone() * total.clone() - pairwise::sum_dim(shifted.clone() * w.clone(), 1); // [B, 1]
        let scale = keep.clone() * (e / classes as f64);
        l = l + smooth * scale.clone();
        g = g + (p.clone() * total - w) * scale;
    }
    let lse = max + log_d.clone(); // [B, 1]
    let zeta = terms.z_loss as f64;
    if zeta > 0.0 {
        // zeta lse^2 per row not ignored; its gradient 2 zeta lse p.
        let zk = keep * zeta;
        l = l + lse.clone().powi_scalar(2) * zk.clone();
        g = g + p.clone() * (lse.clone() * zk * 2.0);
    }
    if let Some(slope) = dh_da {
        g = g * slope;
    } else if scale != 1.0 {
        g = g * scale;
    }
    let token_stats = terms.token_stats.then(|| {
        // -lp[y] = log d - (H[y] - m) and the entropy -sum p lp = log d - sum p (H - m): each
        // a sum of two terms of one sign, no cancellation.
        let log_prob = picked - log_d.clone(); // [B, 1]
        let entropy = log_d - pairwise::sum_dim(p * shifted, 1); // [B, 1]
        let log_prob = log_prob
            .mask_fill(ignored.clone(), 0)
            .mask_fill(invalid, f64::NAN);
        [lse, log_prob, entropy].map(|t| t.squeeze_dim::<1>(1).into_primitive().tensor())
    });
    // An ignored row's G is `0 (p - onehot)`: 0, or NaN where its logits hold a NaN or an
    // infinity, as PyTorch's (and the streamed path's) gradient; its loss is 0 whatever they hold.
    let l = l.mask_fill(ignored, 0).squeeze_dim::<1>(1); // [B]
    HeadRowLosses {
        losses: l.into_primitive().tensor(),
        gradients: g.cast(z_dtype).into_primitive().tensor(),
        token_stats: token_stats.map(|[log_sum_exp, target_log_prob, entropy]| HeadTokenStats {
            log_sum_exp,
            target_log_prob,
            entropy,
        }),
    }
}

/// The logits the softmax sees, `H` `[B, C]`, of Z `[B, C]` under `terms`: `A = act(Z)`,
/// `s A`, then `cap tanh(s A / cap)` with a softcap; and with a softcap `dH/dA` `[B, C]`
/// (`s (1 - tanh^2)`; without, `dH/dA = s`).
pub(crate) fn logits_seen<B: Backend>(
    z: Tensor<B, 2>,
    terms: RowTerms,
) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
    let a = match terms.activation {
        // `Z <= 0 -> 0`, which keeps a NaN (as the op's ReLU).
        HeadActivation::Relu => z.clone().mask_fill(z.lower_equal_elem(0), 0),
        HeadActivation::Identity => z,
    }; // [B, C]
    let scale = terms.logit_scale as f64;
    let h = if scale == 1.0 { a } else { a * scale }; // [B, C]
    match terms.softcap {
        Some(cap) => {
            let cap = cap as f64;
            let u = h / cap; // [B, C]
            // 1 - tanh(u)^2 as 4 e / (1 + e)^2, e = exp(-2 |u|): `1 - t^2` from a rounded t
            // keeps none of its digits where t is near 1 (|u| of 6 and more in f32).
            let e = (u.clone().abs() * -2.0).exp(); // [B, C]
            let slope = e.clone() * (4.0 * scale) / (e + 1.0).powi_scalar(2); // [B, C]
            (u.tanh() * cap, Some(slope))
        }
        None => (h, None),
    }
}

/// The reduction of the loss rows `L` `[B]`: the mean over `sum_r w[y_r]` (`denominator`),
/// the sum, or `L` itself; the sums in [`pairwise`]'s fixed order (`head_sum`).
pub(crate) fn reduce<B: FusedHeadBackend>(
    l: Tensor<B, 1>,
    denominator: Option<Tensor<B, 1>>,
    reduction: HeadReduction,
) -> Tensor<B, 1> {
    match reduction {
        HeadReduction::Mean => sum(l) / denominator.expect("the mean's denominator"),
        HeadReduction::Sum => sum(l),
        HeadReduction::None => l,
    }
}

/// The mean's denominator `sum_r w[y_r]` `[1]` in [`pairwise`]'s fixed order (NaN where a
/// label is outside `[0, C)` and not ignored), or `None` for the other reductions.
pub(crate) fn denominator<B: FusedHeadBackend>(
    rows: &Rows<B>,
    loss: &HeadOptions,
) -> Option<Tensor<B, 1>> {
    (loss.reduction == HeadReduction::Mean).then(|| sum(rows.weight.clone()))
}

/// `t` `[n]` summed by [`FusedHeadBackend::head_sum`] (one launch on the CubeCL backends).
fn sum<B: FusedHeadBackend>(t: Tensor<B, 1>) -> Tensor<B, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(B::head_sum(
        t.into_primitive().tensor(),
    )))
}

/// Each row's upstream gradient `u` `[B]` for the upstream gradient `grad` of the result
/// (`[1]`, or `[B]` for [`HeadReduction::None`]): `g / denominator`, `g` or `g[r]`.
pub(crate) fn row_upstream<B: Backend>(
    grad: Tensor<B, 1>,
    denominator: Option<Tensor<B, 1>>,
    reduction: HeadReduction,
    batch: usize,
) -> Tensor<B, 1> {
    let dtype = denominator.as_ref().map_or(grad.dtype(), |d| d.dtype());
    let grad = grad.cast(dtype);
    match reduction {
        HeadReduction::Mean => {
            (grad / denominator.expect("the mean's denominator")).expand([batch])
        }
        HeadReduction::Sum => grad.expand([batch]),
        HeadReduction::None => grad,
    }
}

/// `L = w[y] l` `[B]` from the streamed path's unweighted per-row losses `l`, 0 where ignored
/// (whatever the row's logits).
pub(crate) fn weighted_rows<B: Backend>(l: FloatTensor<B>, rows: &Rows<B>) -> Tensor<B, 1> {
    let l = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(l)).cast(rows.weight.dtype());
    (l * rows.weight.clone()).mask_fill(rows.ignored.clone(), 0)
}

/// `onehot(target)` `[B, C]` in `dtype` for `target` `[B, 1]` (every index in `[0, C)`): a
/// comparison of each class index with the row's target, element-wise (no scatter, whose
/// additions some backends make atomic).
pub(crate) fn onehot<B: Backend>(
    target: Tensor<B, 2, Int>,
    classes: usize,
    dtype: DType,
) -> Tensor<B, 2> {
    let batch = target.dims()[0];
    let device = target.device();
    let class = Tensor::<B, 1, Int>::arange(0..classes as i64, &device)
        .cast(target.dtype())
        .unsqueeze_dim::<2>(0)
        .expand([batch, classes]); // [B, C], in the targets' int dtype
    class
        .equal(target.expand([batch, classes]))
        .float()
        .cast(dtype) // [B, C]
}

/// The row softmax of `h` `[B, C]` against `target` `[B, 1]` (every index in `[0, C)`), in
/// stock ops, as the loss and its gradient need it.
pub(crate) struct RowSoftmax<B: Backend> {
    /// m, the row's maximum, `[B, 1]`.
    pub max: Tensor<B, 2>,
    /// `H - m`, m the row's maximum, `[B, C]`.
    pub shifted: Tensor<B, 2>,
    /// `d = sum_c exp(H[r, c] - m)`, `[B, 1]`.
    pub d: Tensor<B, 2>,
    /// `p = softmax(H)`, `[B, C]`.
    pub p: Tensor<B, 2>,
    /// `p - onehot(target)`, `[B, C]`, its target column computed as `-(d - e_y) / d` from the
    /// sum of the other columns' exponentials, never as `p_y - 1`.
    pub grad: Tensor<B, 2>,
}

/// [`RowSoftmax`] of `h` against `target`. The target's column is where f32 loses digits: in a
/// confident row `p_y` is within `u` of 1, so `p_y - 1` keeps only the digits of `1 - u`, and
/// the row's gradient no longer sums to 0 (by about `u`), which products with large weights
/// (`dX = dZ W`) multiply into errors past the gate. `-(sum of the others) / d` keeps them: the
/// row then sums to 0 up to the rounding of its small terms. `d` is that sum of the others (in
/// [`pairwise`] order) plus the target's own term.
pub(crate) fn row_softmax<B: Backend>(h: Tensor<B, 2>, target: Tensor<B, 2, Int>) -> RowSoftmax<B> {
    let [batch, classes] = h.dims();
    let m = h.clone().detach().max_dim(1); // [B, 1]
    let shifted = h - m.clone(); // [B, C]
    let e = shifted.clone().exp(); // [B, C]
    let is_target = onehot::<B>(target.clone(), classes, e.dtype()).equal_elem(1); // [B, C]
    let e_y = e.clone().gather(1, target); // [B, 1]
    let others = pairwise::sum_dim(e.clone().mask_fill(is_target.clone(), 0), 1); // [B, 1]
    let d = others.clone() + e_y; // [B, 1]
    let p = e / d.clone(); // [B, C]
    let target_grad = (others.neg() / d.clone()).expand([batch, classes]); // [B, C]
    let grad = p.clone().mask_where(is_target, target_grad); // [B, C]
    RowSoftmax {
        max: m,
        shifted,
        d,
        p,
        grad,
    }
}
