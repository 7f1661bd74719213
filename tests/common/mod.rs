//! Shared helpers of the test binaries: the f64 reference, and the gate assertions.
#![allow(dead_code)]

use burn::backend::ndarray::NdArrayDevice;
use burn::backend::{Autodiff, NdArray};
use burn::module::Param;
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_fused_head::{
    FusedHeadBackend, FusedLinearCrossEntropy, HeadActivation, HeadOptions, HeadPrecision,
    HeadReduction, fused_linear_cross_entropy,
};
use burn_fused_head_testing::gates::{GateReport, StageOutputs, gate, run_stages, run_stages_with};
use burn_fused_head_testing::reference::{HeadData, stock_head_loss, stock_linear_loss};

/// The independent reference: stock Burn ops on NdArray in f64.
pub type Reference = NdArray<f64>;

/// The reference device, with f64 as its default float so that stock ops which create tensors
/// internally stay in f64 (Burn fixes a device type's default dtype once per process).
pub fn reference_device() -> NdArrayDevice {
    let device = NdArrayDevice::Cpu;
    let _already_set =
        burn::tensor::set_default_dtypes::<Reference>(&device, DType::F64, DType::I64);
    device
}

/// The eight stage outputs of the reference for `data` and upstream gradient `grad`.
pub fn reference_stages(data: &HeadData, grad: f64) -> StageOutputs {
    let (x, w, b, labels) = data.tensors::<Reference>(&reference_device(), DType::F64);
    run_stages(x, w, b, labels, grad)
}

/// [`reference_stages`] with `options` (an activation, a precision or both: see
/// `gates::run_stages_with`).
pub fn reference_stages_with(
    data: &HeadData,
    grad: f64,
    options: impl TestOptions,
) -> StageOutputs {
    let (x, w, b, labels) = data.tensors::<Reference>(&reference_device(), DType::F64);
    run_stages_with(x, w, b, labels, grad, opts(options).kernels())
}

/// Panics naming every failing gate, with its first bad element.
pub fn assert_gates(context: &str, reports: &[GateReport]) {
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{context}: gates failed:\n{}",
        failed.join("\n")
    );
}

/// Runs the stages on `B` and gates every output against the reference.
pub fn check_stages<B: FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    grad: f64,
    context: &str,
) -> StageOutputs {
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let got = run_stages(x, w, b, labels, grad);
    let want = reference_stages(data, grad);
    assert_gates(context, &got.gates(&want));
    assert!(
        burn_fused_head_testing::gates::within(got.loss, want.loss),
        "{context}: mean loss {} vs reference {}",
        got.loss,
        want.loss
    );
    got
}

/// Loss and gradients (dX, dW, db) of a head, as f64 vectors.
#[derive(Debug, Clone)]
pub struct HeadGrads {
    pub loss: f64,
    pub dx: Vec<f64>,
    pub dw: Vec<f64>,
    pub db: Vec<f64>,
}

pub use burn_fused_head_testing::gates::values as to_f64;

/// Loss and gradients of `scale * head(x, w, b, labels)` on an autodiff backend, where `head`
/// is either our op or the stock head.
pub fn head_grads<B: AutodiffBackend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    scale: f64,
    head: impl Fn(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1, Int>) -> Tensor<B, 1>,
) -> HeadGrads {
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let loss = head(x.clone(), w.clone(), b.clone(), labels);
    let grads = (loss.clone() * scale).backward();
    HeadGrads {
        loss: to_f64(loss)[0],
        dx: to_f64(x.grad(&grads).unwrap()),
        dw: to_f64(w.grad(&grads).unwrap()),
        db: to_f64(b.grad(&grads).unwrap()),
    }
}

/// Burn's stock autodiff (relu + CrossEntropyLoss) on NdArray f64: the gradients every
/// implementation must reproduce.
pub fn stock_grads(data: &HeadData, scale: f64) -> HeadGrads {
    let (x, w, b, labels) = data.tensors::<Autodiff<Reference>>(&reference_device(), DType::F64);
    head_grads(x, w, b, labels, scale, stock_head_loss)
}

/// Burn's stock autodiff of `Linear`'s logits + `CrossEntropyLoss` (no ReLU) on NdArray f64:
/// the reference of `HeadActivation::Identity`.
pub fn stock_linear_grads(data: &HeadData, scale: f64) -> HeadGrads {
    let (x, w, b, labels) = data.tensors::<Autodiff<Reference>>(&reference_device(), DType::F64);
    head_grads(x, w, b, labels, scale, stock_linear_loss)
}

/// Our op with `HeadActivation::Identity` through `Autodiff<B>` against
/// [`stock_linear_grads`], in chunks of at most `elements` floats on the streamed path (0: its
/// own rule).
pub fn check_identity_autodiff<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    scale: f64,
    context: &str,
    elements: usize,
) {
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let options = chunks(HeadActivation::Identity, elements);
    let got = head_grads(x, w, b, labels, scale, |x, w, b, l| {
        fused_linear_cross_entropy(x, w, Some(b), l, &options)
    });
    assert_grads(context, &got, &stock_linear_grads(data, scale));
}

/// Our op through `Autodiff<B>` against the stock autodiff reference.
pub fn check_autodiff<B: AutodiffBackend + FusedHeadBackend>(
    device: &B::Device,
    data: &HeadData,
    scale: f64,
    context: &str,
) {
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let got = head_grads(x, w, b, labels, scale, relu_loss);
    let want = stock_grads(data, scale);
    assert_grads(context, &got, &want);
}

pub fn assert_grads(context: &str, got: &HeadGrads, want: &HeadGrads) {
    assert_gates(
        context,
        &[
            gate("loss", &[got.loss], &[want.loss]),
            gate("dX", &got.dx, &want.dx),
            gate("dW", &got.dw, &want.dw),
            gate("db", &got.db, &want.db),
        ],
    );
}

/// Loss and gradients of `HeadPrecision::Tf32` through autodiff against the exact f64
/// reference, under the TF32 gate (the gate's bound plus `gates::tf32_slack`, derived from
/// TF32's 10-bit mantissa for any rounding rule: what the large-C path's products on
/// cuBLASLt, or on our kernels, must meet).
pub fn assert_tf32_grads(context: &str, got: &HeadGrads, data: &HeadData, scale: f64) {
    let want = reference_stages(data, scale);
    let slack = burn_fused_head_testing::gates::tf32_slack(data, scale);
    use burn_fused_head_testing::gates::gate_with_slack;
    assert_gates(
        context,
        &[
            gate_with_slack("loss", &[got.loss], &[want.loss], &[slack.loss]),
            gate_with_slack("dX", &got.dx, &want.dx, &slack.dx),
            gate_with_slack("dW", &got.dw, &want.dw, &slack.dw),
            gate_with_slack("db", &got.db, &want.db, &slack.db),
        ],
    );
}

/// Each row's predicted class must hold the row's largest value of the reference's `h`
/// (`[B, C]`, f64) within the gate: the argmax, up to the f32 rounding of near ties.
pub fn assert_predictions(context: &str, got: &[i64], h: &[f64], classes: usize) {
    assert_eq!(
        got.len() * classes,
        h.len(),
        "{context}: one prediction per row"
    );
    for (r, &pick) in got.iter().enumerate() {
        let row = &h[r * classes..(r + 1) * classes];
        let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert!(
            (0..classes as i64).contains(&pick),
            "{context}: row {r} predicts {pick}, outside [0, {classes})"
        );
        assert!(
            burn_fused_head_testing::gates::within(row[pick as usize], top),
            "{context}: row {r} predicts {pick} (H = {}), the row's largest H is {top}",
            row[pick as usize]
        );
    }
}

/// The values of an int tensor as i64.
pub fn to_i64<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().to_vec().expect("i64 values")
}

/// The options of the head these tests were written for: ReLU on the logits, exact f32, the
/// plain mean.
pub fn relu_options() -> HeadOptions {
    HeadOptions::new().with_activation(HeadActivation::Relu)
}

/// What a test passes as the op's options: a precision (with the ReLU), an activation (exact),
/// or whole options as they are.
pub trait TestOptions {
    fn options(self) -> HeadOptions;
}

impl TestOptions for HeadPrecision {
    fn options(self) -> HeadOptions {
        relu_options().with_precision(self)
    }
}

impl TestOptions for HeadActivation {
    fn options(self) -> HeadOptions {
        HeadOptions::new().with_activation(self)
    }
}

impl TestOptions for HeadOptions {
    fn options(self) -> HeadOptions {
        self
    }
}

/// `options` as [`HeadOptions`].
pub fn opts(options: impl TestOptions) -> HeadOptions {
    options.options()
}

/// The cross-entropy options of `loss` (ignored targets, class weights, smoothing, reduction)
/// with the activation, precision and chunk budget of `options`.
pub fn with_loss(loss: &HeadOptions, options: impl TestOptions) -> HeadOptions {
    let kernels = opts(options);
    HeadOptions {
        activation: kernels.activation,
        precision: kernels.precision,
        chunk_elements: kernels.chunk_elements,
        ..loss.clone()
    }
}

/// `options` with chunks of at most `elements` floats on the streamed path (0: the path's own
/// rule), so that small test shapes cross many chunks.
pub fn chunks(options: impl TestOptions, elements: usize) -> HeadOptions {
    opts(options).with_chunk_elements((elements > 0).then_some(elements))
}

/// The ReLU head's mean loss, `[1]`, as a function of X, W, b and the targets.
pub fn relu_loss<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    fused_linear_cross_entropy(x, w, Some(b), labels, &relu_options())
}

/// The head's logits `act(X W^T + b)` under `options`: the module's `forward` on a head made
/// from W and b.
pub fn logits<B: FusedHeadBackend, const D: usize>(
    x: Tensor<B, D>,
    w: Tensor<B, 2>,
    b: Tensor<B, 1>,
    options: HeadOptions,
) -> Tensor<B, D> {
    let head = FusedLinearCrossEntropy {
        weight: Param::from_tensor(w),
        bias: Some(Param::from_tensor(b)),
        options,
    };
    head.forward(x)
}

/// The default wgpu device, after checking that a Vulkan driver is installed (a clear error
/// naming the install command otherwise).
#[cfg(feature = "wgpu")]
pub fn vulkan_device() -> burn::backend::wgpu::WgpuDevice {
    burn_fused_head_testing::vulkan::require_driver();
    Default::default()
}

/// SplitMix64, as `HeadData`'s: the random cases' fixed, portable sequence (the fuzzer's and
/// the loss options').
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// The result, the gradients of `sum(result * upstream)`, and each row's statistics.
#[derive(Debug)]
pub struct Outcome {
    pub out: Vec<f64>,
    pub dx: Vec<f64>,
    pub dw: Vec<f64>,
    pub db: Vec<f64>,
    pub lse: Vec<f64>,
    pub log_prob: Vec<f64>,
    pub entropy: Vec<f64>,
}

/// Whether `loss` ignores the label `y`.
pub fn ignored(loss: &HeadOptions, y: i64) -> bool {
    loss.ignore_index == Some(y) || loss.pad_tokens.iter().flatten().any(|&t| t as i64 == y)
}

/// The LM terms' formula (`tests/logit_terms.rs`'s module doc) on NdArray f64 in stock Burn
/// ops, its gradients by Burn's autodiff: the result under `loss`'s reduction, the gradients
/// of `sum(result * upstream)`, and each row's statistics.
pub fn terms_formula(data: &HeadData, loss: &HeadOptions, upstream: &[f64]) -> Outcome {
    type AB = Autodiff<Reference>;
    let device = reference_device();
    let (x, w, b, _) = data.tensors::<AB>(&device, DType::F64);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let (n, c) = (data.batch, data.classes);
    let class_weight = |k: usize| loss.class_weights.as_ref().map_or(1.0, |w| w[k] as f64);
    let e = loss.smoothing.unwrap_or(0.0) as f64;
    let zeta = loss.z_loss.unwrap_or(0.0) as f64;
    let mut a = vec![0.0; n * c];
    let mut keep = vec![0.0; n];
    let mut onehot = vec![0.0; n * c];
    let mut total = 0.0;
    for (r, &y) in data.labels.iter().enumerate() {
        if ignored(loss, y) {
            continue;
        }
        let y = y as usize;
        for k in 0..c {
            a[r * c + k] = e / c as f64 * class_weight(k);
        }
        a[r * c + y] += (1.0 - e) * class_weight(y);
        onehot[r * c + y] = 1.0;
        keep[r] = 1.0;
        total += class_weight(y);
    }
    let f64s = |v: Vec<f64>, shape: Vec<usize>| {
        Tensor::<AB, 2>::from_data(TensorData::new(v, shape), (&device, DType::F64))
    };
    let (a, onehot, keep) = (
        f64s(a, vec![n, c]),
        f64s(onehot, vec![n, c]),
        f64s(keep, vec![n, 1]),
    );
    let z = x.clone().matmul(w.clone().transpose()) + b.clone().unsqueeze_dim(0);
    // ReLU as the op computes it: 0 where Z <= 0 (its derivative 0 there), and a NaN Z kept
    // (Burn's `relu` on NdArray maps NaN to 0).
    let h = match loss.activation {
        HeadActivation::Relu => z.clone().mask_fill(z.lower_equal_elem(0.0), 0.0),
        HeadActivation::Identity => z,
    } * loss.logit_scale.unwrap_or(1.0) as f64;
    let h = match loss.softcap {
        Some(cap) => (h / cap as f64).tanh() * cap as f64,
        None => h,
    };
    let lp = log_softmax(h.clone(), 1); // [B, C]
    let lse = (h - lp.clone()).slice([0..n, 0..1]); // [B, 1]: H - lp is lse in every column
    let l = -(lp.clone() * a).sum_dim(1) + lse.clone().powi_scalar(2) * keep * zeta; // [B, 1]
    let l = l.squeeze_dim::<1>(1);
    let out = match loss.reduction {
        HeadReduction::Mean => l.sum() / total,
        HeadReduction::Sum => l.sum(),
        HeadReduction::None => l,
    };
    let v = Tensor::<AB, 1>::from_data(
        TensorData::new(upstream.to_vec(), [upstream.len()]),
        (&device, DType::F64),
    );
    let grads = (out.clone() * v).sum().backward();
    let entropy = -(lp.clone().exp() * lp.clone()).sum_dim(1);
    let log_prob = (lp * onehot).sum_dim(1);
    Outcome {
        out: to_f64(out),
        dx: to_f64(x.grad(&grads).unwrap()),
        dw: to_f64(w.grad(&grads).unwrap()),
        db: to_f64(b.grad(&grads).unwrap()),
        lse: to_f64(lse.squeeze_dim::<1>(1)),
        log_prob: to_f64(log_prob.squeeze_dim::<1>(1)),
        entropy: to_f64(entropy.squeeze_dim::<1>(1)),
    }
}

/// The sum of `v` in the crate's fixed pairwise order (`pairwise::sum_dim`,
/// `FusedHeadBackend::head_sum`), written out on the host: element k of the first half plus
/// element k of the second, an odd length carrying its last element; 0 for no element.
pub fn pairwise_tree(mut v: Vec<f32>) -> f32 {
    while v.len() > 1 {
        let half = v.len() / 2;
        let mut next: Vec<f32> = (0..half).map(|k| v[k] + v[k + half]).collect();
        if v.len() % 2 == 1 {
            next.push(v[2 * half]);
        }
        v = next;
    }
    v.first().copied().unwrap_or(0.0)
}
