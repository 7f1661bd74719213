//! The functional form of the op, and a check of the targets.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorPrimitive};

use crate::backend::{FusedHeadBackend, HeadExtraOutputs, HeadExtras, HeadTokenStats};
use crate::options::{HeadOptions, HeadReduction, KernelOptions};
use crate::validate;

/// The cross-entropy of `act(X W^T + b)` against `targets` under `options`: `Linear` +
/// `CrossEntropyLoss` in one fused op, forward and backward, with no `[B, C]` tensor kept
/// where the CubeCL backends stream the classes (C > 32).
///
/// - `x`: X `[B, I]`, or any leading dims as `Linear` takes them: X `[d0, .., dk, I]` with
///   targets `[d0, .., dk]` is the op on the `B = d0 .. dk` rows (a reshape, no copy of
///   contiguous data); the gradient of X comes back in X's shape.
/// - `weight`: W stored `[C, I]`, one class's coefficients contiguous: an embedding's layout,
///   so a weight tied to the input embedding passes as it is. (`nn::Linear` stores its weight
///   `[I, C]`: pass `linear.weight.val().transpose()`, or convert the layer with
///   [`FusedLinearCrossEntropy::from`](crate::FusedLinearCrossEntropy).)
/// - `bias`: b `[C]`, or `None` for none.
/// - `targets`: class indices in `[0, C)`, in any int dtype of the backend.
///
/// For row r with target y, the logits `H = act(X W^T + b)[r]` (times the logit scale s and
/// softcapped, `cap tanh(s act(Z) / cap)`, where the options say so), `lp = log_softmax(H)`,
/// `lse = log sum_c exp(H[c])`, class weights w, smoothing e and z-loss scale zeta (see
/// [`HeadOptions`]):
///
/// ```text
/// L[r] = (1 - e) w[y] (-lp[y]) + (e / C) sum_c w[c] (-lp[c]) + zeta lse^2   (0 for an ignored row)
/// mean = sum_r L[r] / sum_r w[y_r] (the rows not ignored)     sum = sum_r L[r]     none = L
/// ```
///
/// Returns `[1]` for the mean and the sum, and for [`HeadReduction::None`] the `[N]` losses of
/// the rows in order (`.reshape(targets.dims())` gives them the targets' shape). On an
/// [`Autodiff`](burn::backend::Autodiff) backend the result is tracked: `backward()` gives the
/// gradients of X, W and b (those that require them) for any upstream gradient.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::tensor::{Int, Tensor};
/// use burn_fused_head::{HeadOptions, fused_linear_cross_entropy};
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let x = Tensor::<B, 2>::from_floats([[1.0, 2.0], [0.5, -1.0], [0.0, 3.0]], &device); // [B, I]
/// let weight = Tensor::<B, 2>::from_floats([[0.1, 0.2], [0.3, -0.4]], &device).require_grad(); // [C, I]
/// let targets = Tensor::<B, 1, Int>::from_ints([0, 1, 1], &device); // [B]
///
/// let loss = fused_linear_cross_entropy(x, weight.clone(), None, targets, &HeadOptions::new());
/// let grads = loss.backward();
/// assert_eq!(weight.grad(&grads).unwrap().dims(), [2, 2]);
/// ```
///
/// Edge cases:
/// - A target outside `[0, C)` that is not ignored never reaches memory as an index: its row's
///   loss is NaN, so under the mean the result and every gradient are NaN.
///   [`validate_targets`] gives an error instead.
/// - Every row ignored under the mean gives NaN (0 / 0) and zero gradients, as PyTorch. An
///   empty batch (B = 0) gives NaN (mean), 0 (sum) or `[0]` (none, untracked); its gradients
///   are zero.
/// - Paths: plain options ([`HeadOptions::is_plain`]) run the fused kernels; so do a logit
///   scale and a softcap alone at C > 32 on the CubeCL backends (in the streamed row kernel,
///   with no row weight). Without smoothing, C > 32 on the CubeCL backends runs the streamed
///   path with each row's weight (and the logit scale, softcap and z-loss) in its row kernel; the reduction `None` runs
///   that pass again in the backward step (twice the products of the mean); f16 tensors run
///   it in f32 on their values cast up. Label smoothing, C <= 32 and the stock-op backends run
///   the materialized path, which holds Z and the rows' gradients, two `[B, C]` tensors.
///
/// # Panics
/// Before anything runs, on mismatched shapes (the I of X and W, b not `[C]`, targets not
/// X's leading dims, C = 0), inputs on different devices, float dtypes that differ or that the
/// backend's kernels do not run, tensors too large for the kernels' addressing, class weights
/// that are not `[C]` or not finite, a smoothing outside `[0, 1]`, a logit scale that is not
/// finite, a softcap that is not finite and > 0, a z-loss that is not finite and >= 0, or a
/// chunk budget of 0.
pub fn fused_linear_cross_entropy<B: FusedHeadBackend, const D: usize, const DL: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    targets: Tensor<B, DL, Int>,
    options: &HeadOptions,
) -> Tensor<B, 1> {
    let op = "fused_linear_cross_entropy";
    cross_entropy(op, x, weight, bias, targets, options, HeadExtras::default()).0
}

/// [`fused_linear_cross_entropy`] and the predicted class of each row, in one call (for
/// metrics: accuracy without a second pass over X): the argmax over C of the logits
/// `act(X W^T + b)` (times the logit scale: its argmin for a negative one; a softcap, which
/// keeps the order, is left out so that saturated logits do not tie), the first class of the
/// row's largest value (a row with a NaN gets an unspecified class; its loss is NaN), in the
/// targets' shape and int dtype. Where the streamed path runs (C > 32 on the CubeCL
/// backends) they come from its row kernel, with no `[B, C]` tensor; elsewhere from the
/// forward pass's Z. The loss, its tracking, checks and panics are
/// [`fused_linear_cross_entropy`]'s.
pub fn fused_linear_cross_entropy_and_predictions<
    B: FusedHeadBackend,
    const D: usize,
    const DL: usize,
>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    targets: Tensor<B, DL, Int>,
    options: &HeadOptions,
) -> (Tensor<B, 1>, Tensor<B, DL, Int>) {
    let op = "fused_linear_cross_entropy_and_predictions";
    let dims = targets.dims();
    let extras = HeadExtras::PREDICTIONS;
    let (loss, outputs) = cross_entropy(op, x, weight, bias, targets, options, extras);
    let predictions =
        Tensor::<B, 1, Int>::from_primitive(outputs.predictions.expect("predictions asked for")); // [B]
    (loss, predictions.reshape(dims))
}

/// Each row's statistics of the logits H the softmax sees (after the activation, the logit
/// scale and the softcap), in the targets' shape, from the pass that computes the loss: what
/// RL and distillation losses and a training log read, without a second product. Never
/// tracked (no gradient flows through them); in X's float dtype.
#[derive(Debug, Clone)]
pub struct TokenStats<B: Backend, const D: usize> {
    /// `lse[r] = log sum_c exp(H[r, c])`, the log of the softmax's normaliser (what the z-loss
    /// squares).
    pub log_sum_exp: Tensor<B, D>,
    /// `log softmax(H[r])[y_r]`, the log-probability of the row's target; 0 for an ignored
    /// row (NaN for a target outside `[0, C)` that is not ignored).
    pub target_log_prob: Tensor<B, D>,
    /// `-sum_c p[c] log p[c]` with `p = softmax(H[r])`: the entropy of the row's distribution
    /// (of every row, ignored or not).
    pub entropy: Tensor<B, D>,
}

/// [`fused_linear_cross_entropy`] and each row's [`TokenStats`] (log-sum-exp, log-probability
/// of the target, entropy), in one call, from the same row pass as the loss (the streamed row
/// kernel where the options' path streams, else the materialized path's). The loss, its
/// tracking, checks and panics are [`fused_linear_cross_entropy`]'s.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::tensor::{Int, Tensor};
/// use burn_fused_head::{HeadOptions, fused_linear_cross_entropy_with_token_stats};
///
/// let device = Default::default();
/// let x = Tensor::<NdArray, 2>::from_floats([[1.0, 2.0], [0.5, -1.0]], &device); // [B, I]
/// let weight = Tensor::<NdArray, 2>::from_floats([[0.1, 0.2], [0.3, -0.4]], &device); // [C, I]
/// let targets = Tensor::<NdArray, 1, Int>::from_ints([0, 1], &device); // [B]
/// let options = HeadOptions::new().with_z_loss(Some(1e-4));
/// let (loss, stats) =
///     fused_linear_cross_entropy_with_token_stats(x, weight, None, targets, &options);
/// let z_loss = stats.log_sum_exp.powi_scalar(2).mean() * 1e-4; // the z-loss part, to log it
/// assert_eq!(stats.entropy.dims(), [2]);
/// ```
pub fn fused_linear_cross_entropy_with_token_stats<
    B: FusedHeadBackend,
    const D: usize,
    const DL: usize,
>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    targets: Tensor<B, DL, Int>,
    options: &HeadOptions,
) -> (Tensor<B, 1>, TokenStats<B, DL>) {
    let op = "fused_linear_cross_entropy_with_token_stats";
    let dims = targets.dims();
    let extras = HeadExtras {
        predictions: false,
        token_stats: true,
    };
    let dtype = x.dtype();
    let (loss, outputs) = cross_entropy(op, x, weight, bias, targets, options, extras);
    let stats = outputs.token_stats.expect("the statistics asked for"); // [B] each
    let shaped = |t| {
        Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t))
            .cast(dtype)
            .reshape(dims)
    };
    let stats = TokenStats {
        log_sum_exp: shaped(stats.log_sum_exp),
        target_log_prob: shaped(stats.target_log_prob),
        entropy: shaped(stats.entropy),
    };
    (loss, stats)
}

/// The op on X's rows: the result and what `extras` asks for.
fn cross_entropy<B: FusedHeadBackend, const D: usize, const DL: usize>(
    op: &str,
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    targets: Tensor<B, DL, Int>,
    options: &HeadOptions,
    extras: HeadExtras,
) -> (Tensor<B, 1>, HeadExtraOutputs<B>) {
    let targets = rows_of_targets(op, &x, targets); // [B]
    let x = rows_of(op, x); // [B, I]
    let bias = bias_or_zeros(bias, &weight); // [C]
    validate::head_tensors(op, &x, &weight, &bias, Some(&targets));
    options.check(op, weight.dims()[0]);
    let batch = x.dims()[0];
    let (device, label_dtype, dtype) = (x.device(), targets.dtype(), x.dtype());
    // What an empty batch gives besides the result: empty predictions and statistics.
    let empty = |extras: HeadExtras| {
        let float = || {
            Tensor::<B, 1>::empty([0], (&device, dtype))
                .into_primitive()
                .tensor()
        };
        HeadExtraOutputs {
            predictions: extras
                .predictions
                .then(|| Tensor::<B, 1, Int>::empty([0], (&device, label_dtype)).into_primitive()),
            token_stats: extras.token_stats.then(|| HeadTokenStats {
                log_sum_exp: float(),
                target_log_prob: float(),
                entropy: float(),
            }),
        }
    };
    if batch == 0 && !options.is_plain() {
        match options.reduction {
            // The mean over no row: NaN, the plain op's own answer.
            HeadReduction::Mean => {}
            HeadReduction::Sum => {
                // The sum over no row: 0, tracked (the op's gradients of an empty batch are zero).
                let plain = plain_of(options);
                let none = HeadExtras::default();
                let (nan, _) = cross_entropy(op, x, weight, Some(bias), targets, &plain, none);
                return (nan.clone().mask_fill(nan.is_nan(), 0), empty(extras));
            }
            HeadReduction::None => {
                let none = Tensor::empty([0], (&device, dtype));
                return (none, empty(extras));
            }
        }
    }
    if batch == 0 {
        // The plain mean over no row (NaN), tracked; the extras empty.
        let plain = plain_of(options);
        let (loss, _) = B::head_cross_entropy(
            x.into_primitive().tensor(),
            weight.into_primitive().tensor(),
            bias.into_primitive().tensor(),
            targets.into_primitive(),
            &plain,
            HeadExtras::default(),
        );
        let loss = Tensor::from_primitive(TensorPrimitive::Float(loss));
        return (loss, empty(extras));
    }
    let (loss, outputs) = B::head_cross_entropy(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        targets.into_primitive(),
        options,
        extras,
    );
    (
        Tensor::from_primitive(TensorPrimitive::Float(loss)),
        outputs,
    )
}

/// `options` with the plain mean's loss options (activation, precision, chunks,
/// accumulation and logits kept).
fn plain_of(options: &HeadOptions) -> HeadOptions {
    HeadOptions::new()
        .with_activation(options.activation)
        .with_precision(options.precision)
        .with_chunk_elements(options.chunk_elements)
        .with_accumulation(options.accumulation)
        .with_logits(options.logits)
}

/// `H = act(X W^T + b)` `[.., C]` for X `[.., I]`: what the module's `forward` returns, from
/// the backend's `head_logits` (the op's kernels; tracked on an `Autodiff` backend).
pub(crate) fn logits<B: FusedHeadBackend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    kernels: KernelOptions,
) -> Tensor<B, D> {
    let op = "FusedLinearCrossEntropy::forward";
    let mut out_dims = x.dims();
    out_dims[D - 1] = weight.dims()[0];
    let x = rows_of(op, x); // [B, I]
    let bias = bias_or_zeros(bias, &weight); // [C]
    validate::head_tensors(op, &x, &weight, &bias, None);
    let h = B::head_logits(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.into_primitive().tensor(),
        kernels,
    );
    let h = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(h)); // [B, C]
    if D == 2 {
        Tensor::from_primitive(h.into_primitive())
    } else {
        h.reshape(out_dims)
    }
}

/// b, or zeros `[C]` in W's dtype where there is none (untracked: no gradient). An empty
/// tensor for C = 0, made without a fill kernel (the checks then refuse it).
fn bias_or_zeros<B: Backend>(bias: Option<Tensor<B, 1>>, weight: &Tensor<B, 2>) -> Tensor<B, 1> {
    bias.unwrap_or_else(|| {
        let (classes, device, dtype) = (weight.dims()[0], weight.device(), weight.dtype());
        if classes == 0 {
            Tensor::empty([0], (&device, dtype))
        } else {
            Tensor::zeros([classes], (&device, dtype))
        }
    })
}

/// X `[d0, .., dk, I]` as its rows `[d0 .. dk, I]` (rank 2 as it is).
fn rows_of<B: Backend, const D: usize>(op: &str, x: Tensor<B, D>) -> Tensor<B, 2> {
    if D < 2 {
        validate::fail_rank(
            op,
            "X must be [.., I] with at least one leading dim",
            &x.dims(),
        );
    }
    if D == 2 {
        return Tensor::from_primitive(x.into_primitive());
    }
    let dims = x.dims();
    let rows = dims[..D - 1].iter().product::<usize>();
    x.reshape([rows, dims[D - 1]])
}

/// Targets `[d0, .., dk]` of X `[d0, .., dk, I]` as `[d0 .. dk]`; panics naming both shapes
/// when they do not match (rank 2 and 1 pass as they are, checked with the other inputs).
fn rows_of_targets<B: Backend, const D: usize, const DL: usize>(
    op: &str,
    x: &Tensor<B, D>,
    targets: Tensor<B, DL, Int>,
) -> Tensor<B, 1, Int> {
    if D == 2 && DL == 1 {
        return Tensor::from_primitive(targets.into_primitive());
    }
    let (x_dims, target_dims) = (x.dims(), targets.dims());
    let leading = &x_dims[..D.saturating_sub(1)];
    if D < 2 || leading != &target_dims[..] {
        validate::fail_rank(
            op,
            &format!("targets must be {leading:?}, the leading dims of X {x_dims:?}"),
            &target_dims,
        );
    }
    targets.reshape([target_dims.iter().product::<usize>()])
}

/// A target outside `[0, C)`, found by [`validate_targets`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError {
    /// Index (in the flattened targets) of the first bad target.
    pub index: usize,
    /// Its value.
    pub target: i64,
    /// The number of classes C.
    pub classes: usize,
    /// How many targets are outside `[0, C)`.
    pub count: usize,
}

impl core::fmt::Display for TargetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} target(s) outside [0, {}); the first is targets[{}] = {}",
            self.count, self.classes, self.index, self.target
        )
    }
}

impl std::error::Error for TargetError {}

/// Checks that every target is in `[0, classes)` or is `ignore_index` (pass
/// `options.ignore_index`, or `None`), for callers who want an error rather than the op's NaN
/// loss on a bad row. Reads the targets back to the host (a device sync).
///
/// ```
/// use burn::backend::NdArray;
/// use burn::tensor::{Int, Tensor};
/// use burn_fused_head::validate_targets;
///
/// let targets = Tensor::<NdArray, 1, Int>::from_ints([0, 3, -100], &Default::default());
/// assert!(validate_targets(&targets, 4, Some(-100)).is_ok());
/// let error = validate_targets(&targets, 3, Some(-100)).unwrap_err();
/// assert_eq!((error.index, error.target, error.count), (1, 3, 1));
/// ```
pub fn validate_targets<B: Backend, const D: usize>(
    targets: &Tensor<B, D, Int>,
    classes: usize,
    ignore_index: Option<i64>,
) -> Result<(), TargetError> {
    let data = targets.to_data().convert::<i64>();
    let values = data.as_slice::<i64>().expect("targets converted to i64");
    let bad = |v: &i64| Some(*v) != ignore_index && (*v < 0 || *v >= classes as i64);
    match values.iter().position(bad) {
        None => Ok(()),
        Some(index) => Err(TargetError {
            index,
            target: values[index],
            classes,
            count: values.iter().filter(|v| bad(v)).count(),
        }),
    }
}
