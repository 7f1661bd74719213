//! The gates: every element of every stage's output against an independent reference,
//! `|got - ref| <= 2e-5 + 2e-4 * |ref|`.
//!
//! A mixed bound: a pure relative bound fails near zero, a pure absolute one grows too loose
//! with magnitude. What remains is ordinary float ordering (the kernels accumulate in f32, the
//! reference in f64).

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Shape, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use burn_fused_head::backend::{HeadWanted, KernelOptions};
use burn_fused_head::{FusedHeadBackend, HeadActivation, HeadPrecision};

/// Absolute part of the gate.
pub const ABS_TOL: f64 = 2e-5;
/// Relative part of the gate.
pub const REL_TOL: f64 = 2e-4;

/// The names of the eight gates, in the order of the pass.
pub const GATE_NAMES: [&str; 8] = ["Z", "H", "loss", "dH", "dZ", "dW", "db", "dX"];

/// Whether one element passes: within the bound, or both NaN, or both the same infinity
/// (so an edge case whose reference is NaN must produce NaN, not a number).
pub fn within(got: f64, want: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= ABS_TOL + REL_TOL * want.abs()
}

/// One gate's verdict on one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct GateReport {
    /// The tensor's name (see [`GATE_NAMES`]).
    pub name: String,
    /// Number of elements compared.
    pub len: usize,
    /// Largest `|got - ref|` over the finite pairs.
    pub max_abs_error: f64,
    /// How many elements failed.
    pub failed: usize,
    /// The first failing element: `(index, got, want)`.
    pub first_failure: Option<(usize, f64, f64)>,
}

impl GateReport {
    /// Every element passed.
    pub fn passed(&self) -> bool {
        self.failed == 0
    }
}

impl core::fmt::Display for GateReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        write!(
            f,
            "{:<5} {:>12.3e} {}",
            self.name, self.max_abs_error, verdict
        )?;
        if let Some((i, got, want)) = self.first_failure {
            write!(
                f,
                "  (first bad element {i}: got {got:e}, want {want:e}, |diff| {:e}; {} of {} failed)",
                (got - want).abs(),
                self.failed,
                self.len
            )?;
        }
        Ok(())
    }
}

/// Compares `got` with `want` element by element. Panics if the lengths differ (a shape bug is
/// not a tolerance question).
pub fn gate(name: &str, got: &[f64], want: &[f64]) -> GateReport {
    assert_eq!(
        got.len(),
        want.len(),
        "gate {name}: got {} elements, want {}",
        got.len(),
        want.len()
    );
    let mut report = GateReport {
        name: name.to_string(),
        len: got.len(),
        max_abs_error: 0.0,
        failed: 0,
        first_failure: None,
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let diff = (g - w).abs();
        if diff.is_finite() {
            report.max_abs_error = report.max_abs_error.max(diff);
        }
        if !within(g, w) {
            report.failed += 1;
            report.first_failure.get_or_insert((i, g, w));
        }
    }
    report
}

/// [`gate`] with a per-element allowance added to the gate's bound:
/// `|got - ref| <= 2e-5 + 2e-4 |ref| + slack[i]` (NaN and infinities as in [`within`]).
pub fn gate_with_slack(name: &str, got: &[f64], want: &[f64], slack: &[f64]) -> GateReport {
    assert_eq!(
        slack.len(),
        want.len(),
        "gate {name}: slack of another length"
    );
    let mut report = gate(name, got, want);
    report.failed = 0;
    report.first_failure = None;
    for (i, ((&g, &w), &extra)) in got.iter().zip(want).zip(slack).enumerate() {
        let pass = if g.is_finite() && w.is_finite() {
            (g - w).abs() <= ABS_TOL + REL_TOL * w.abs() + extra
        } else {
            within(g, w)
        };
        if !pass {
            report.failed += 1;
            report.first_failure.get_or_insert((i, g, w));
        }
    }
    report
}

/// The relative error of one operand rounded to TF32 by any rule, to nearest or toward zero:
/// 10 mantissa bits kept, so at most 2^-10 (truncation, the worst rule).
pub const TF32_OPERAND_ERROR: f64 = 1.0 / 1024.0;

/// The allowance of the TF32 gate for products whose TF32 rounding is not documented (NVIDIA's
/// cuBLASLt: its kernels may round to nearest or truncate, and may run some shapes in f32),
/// per element of the loss and the gradients, for inputs `data` and upstream gradient `grad`.
///
/// Derived from the format, for operands rounded with relative error at most
/// `u` = [`TF32_OPERAND_ERROR`] and products accumulated in f32, all quantities in f64 from the
/// exact forward pass. The f32 accumulation's own error is left to the gate's bound, as for the
/// exact path: it is not proportional to `|ref|` (it grows like `K 2^-24 sum |a b|`), so an
/// output with heavy cancellation over a long K could exceed it; the exact path's gates have
/// not met one.
/// - a product term `a b` is off by at most `t |a b|`, `t = 2u + u^2`, so a logit moves by
///   `|Z'_rc - Z_rc| <= e_rc = t A_rc` with `A = |X| |W|^T`; ReLU is 1-Lipschitz, so H too;
///   `e_r = max_c e_rc`;
/// - a row's loss `lse(H_r) - H_ry` moves by at most `2 e_r`;
/// - a probability moves by at most the factor `exp(2 e_r)`, so dZ by `D_rc = |g| p_rc
///   (exp(2 e_r) - 1) / B`, plus `|g| |p_rc - onehot_rc| / B` where the ReLU mask can flip
///   (`|Z_rc| <= e_rc`: one side has that value, the other 0);
/// - dW, dX: the moved dZ through the exact other operand, plus the product's own rounding of
///   both operands: `dW_ci: sum_r D_rc |X_ri| + t sum_r (|dZ_rc| + D_rc) |X_ri|`, dX likewise
///   over W; db: `sum_r D_rc`.
pub fn tf32_slack(data: &crate::reference::HeadData, grad: f64) -> Slack {
    let (b, i, c) = (data.batch, data.inputs, data.classes);
    let t = 2.0 * TF32_OPERAND_ERROR + TF32_OPERAND_ERROR * TF32_OPERAND_ERROR;
    let x = |r: usize, k: usize| data.x[r * i + k] as f64;
    let w = |j: usize, k: usize| data.weight[j * i + k] as f64;
    let mut slack = Slack::zeros(b, i, c);
    let scale = grad.abs() / b.max(1) as f64;
    for r in 0..b {
        let (z, h, m, d) = exact_row(data, r, true);
        let e: Vec<f64> = (0..c)
            .map(|j| t * (0..i).map(|k| (x(r, k) * w(j, k)).abs()).sum::<f64>())
            .collect();
        let e_row = e.iter().cloned().fold(0.0, f64::max);
        slack.loss += 2.0 * e_row / b as f64;
        let label = data.labels[r];
        for j in 0..c {
            let p = (h[j] - m).exp() / d;
            let onehot = if label == j as i64 { 1.0 } else { 0.0 };
            let dz = if z[j] > 0.0 {
                scale * (p - onehot).abs()
            } else {
                0.0
            };
            // The probability's move; where the mask can flip, also the whole (p - onehot) / B
            // that one side has and the other has not.
            let moved = scale * p * ((2.0 * e_row).exp() - 1.0)
                + if z[j].abs() <= e[j] {
                    scale * (p - onehot).abs()
                } else {
                    0.0
                };
            slack.db[j] += moved;
            for k in 0..i {
                let operand = t * (dz + moved);
                slack.dw[j * i + k] += (moved + operand) * x(r, k).abs();
                slack.dx[r * i + k] += (moved + operand) * w(j, k).abs();
            }
        }
    }
    slack
}

/// Row `r` of the forward pass in f64 on `data`: `(Z, H, m, d)` with `H = ReLU(Z)` (with
/// `relu`, else `H = Z`), `m` the largest of H and `d = sum exp(H - m)`.
fn exact_row(
    data: &crate::reference::HeadData,
    r: usize,
    relu: bool,
) -> (Vec<f64>, Vec<f64>, f64, f64) {
    row_with(data, r, relu, |p| p)
}

/// [`exact_row`] with each product `P = X W^T` passed through `logit` before the bias is
/// added (a rounding, for the tests' simulated steps).
fn row_with(
    data: &crate::reference::HeadData,
    r: usize,
    relu: bool,
    logit: impl Fn(f64) -> f64,
) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let (i, c) = (data.inputs, data.classes);
    let z: Vec<f64> = (0..c)
        .map(|j| {
            logit(
                (0..i)
                    .map(|k| data.x[r * i + k] as f64 * data.weight[j * i + k] as f64)
                    .sum::<f64>(),
            ) + data.bias[j] as f64
        })
        .collect();
    let h: Vec<f64> = z
        .iter()
        .map(|&v| if relu { v.max(0.0) } else { v })
        .collect();
    let m = h.iter().cloned().fold(f64::MIN, f64::max);
    let d: f64 = h.iter().map(|v| (v - m).exp()).sum();
    (z, h, m, d)
}

/// The unit roundoff `u` and the largest absolute rounding error of a value below the normal
/// range `eta` (half the smallest subnormal) of a half-precision dtype the op runs: bf16, 8
/// significant bits and f32's exponent range (smallest subnormal 2^-133); f16, 11 significant
/// bits and a smallest subnormal of 2^-24. `None` for any other dtype.
pub fn half_roundoff(dtype: DType) -> Option<(f64, f64)> {
    match dtype {
        DType::BF16 => Some((2f64.powi(-8), 2f64.powi(-134))),
        DType::F16 => Some((2f64.powi(-11), 2f64.powi(-25))),
        _ => None,
    }
}

/// The allowance of the half-precision gate (bf16 or f16 tensors, `dtype`) per element of the loss and
/// the gradients, for inputs `data` whose values are already of that type (the f64 reference
/// then sees the same numbers), upstream gradient `grad` (a value of that type too) and
/// `activation`.
///
/// Derived from the format, with `u` and `eta` of [`half_roundoff`] (a value `v` rounds to
/// within `u |v| + eta`). The products multiply half values, which is exact in f32, and
/// accumulate in f32 (on tensor cores natively, whose accumulation order and alignment of
/// partial sums are NVIDIA's: like the exact path's f32 sums, its error is left to the gate's
/// bound, which grows like `K 2^-24 sum |a b|` and has held); the loss, the softmax and dZ are
/// f32. What the half type adds:
/// - bf16 only (f16 never rounds dZ or keeps Z, `src/cube/half.rs`): dZ is rounded before it
///   is an operand of the dX and dW products (the native path's dZ
///   copy; the f32 fallback's rounded `dH`): `e_rc = u |dZ_rc| + eta |g|`, and where the ReLU
///   mask can flip (a `|Z_rc| <= eta` rounded to 0; bf16's `eta` makes that all but
///   impossible), `|dH_rc|` besides; through the exact
///   other operand, `dX_ri: sum_c e_rc |W_ci|`, `dW_ci: sum_r e_rc |X_ri|`, and `db_c:
///   sum_r e_rc` (the fallback sums the rounded dZ; the native path sums the f32 one);
/// - each output is rounded to the type once, and once more where autodiff scales it by the
///   upstream gradient: `(2u + u^2) (|ref| + moved) + 2 eta` on top of the moved amount; the
///   loss, which autodiff does not scale: `u |loss| + eta`.
pub fn half_slack(
    data: &crate::reference::HeadData,
    grad: f64,
    dtype: DType,
    activation: HeadActivation,
) -> Slack {
    half_slack_in_chunks(data, grad, dtype, activation, None, false)
}

/// [`half_slack`] for the lean mode (`HeadAccumulation::Lean`), whose streamed path sums dW
/// in the half type over chunks of `rows` rows: after every chunk but the last, the running
/// dW `S_k` (the rows before the chunk's end) is rounded to the type, which moves it by at most
/// `u |S_k| + eta` for a unit upstream gradient. Each such rounding adds, to the element's
/// allowance, `u (|S_k| + m_k) + eta |grad|` (with the upstream gradient `grad`, by which
/// autodiff scales the sums), `m_k` what dZ's rounding and the earlier roundings may have
/// moved `S_k`; the last chunk's rounding is [`half_slack`]'s own. The loss, dX and db are as
/// [`half_slack`]'s (the mode sums db in f32, and dX is written once per row).
pub fn lean_slack(
    data: &crate::reference::HeadData,
    grad: f64,
    dtype: DType,
    activation: HeadActivation,
    rows: usize,
) -> Slack {
    half_slack_in_chunks(data, grad, dtype, activation, Some(rows.max(1)), false)
}

/// The bf16 allowance with rounded logits (`HeadLogits::Rounded`): [`half_slack`]'s, or with
/// `lean` rows [`lean_slack`]'s, for a path that rounds each logit product `P = X W^T` to bf16
/// before the bias and the softmax, writes dZ over it in bf16, and sums db from that rounded
/// dZ. With `u`, `eta` of bf16 ([`half_roundoff`]):
/// - a logit moves by at most `e_rc = u |P_rc| + eta` (the product's own f32 sum is left to
///   the gate's bound, as everywhere); the activation is 1-Lipschitz, so H too; `e_r = max_c
///   e_rc`;
/// - a row's loss `lse(H_r) - H_ry` moves by at most `2 e_r`, the mean loss by their mean;
/// - a probability moves by at most the factor `exp(2 e_r)`, so dZ by `D_rc = |g| p_rc
///   (exp(2 e_r) - 1) / B` where it is not masked, plus `|g| |p_rc - onehot_rc| / B` where
///   the ReLU mask can flip (`|Z_rc| <= e_rc`), as in [`tf32_slack`];
/// - dZ, so moved, is rounded to bf16 as [`half_slack`]'s is, `u (|dZ_rc| + D_rc) + eta |g|`,
///   and reaches dX, dW and db (which sums the rounded dZ) through the exact other operand
///   with `D_rc`; the outputs' roundings as [`half_slack`]'s, of the moved values.
///
/// For the plain options, as [`half_slack`]: with a logit scale s a logit would move by
/// `s e_rc`, and the softcap and the z-loss add terms not modelled here.
pub fn rounded_logits_slack(
    data: &crate::reference::HeadData,
    grad: f64,
    activation: HeadActivation,
    lean: Option<usize>,
) -> Slack {
    half_slack_in_chunks(
        data,
        grad,
        DType::BF16,
        activation,
        lean.map(|rows| rows.max(1)),
        true,
    )
}

/// [`half_slack`], with dW rounded after every chunk of `lean` rows but the last where given
/// ([`lean_slack`]), and with the logits rounded to the type where `logits_rounded`
/// ([`rounded_logits_slack`]).
fn half_slack_in_chunks(
    data: &crate::reference::HeadData,
    grad: f64,
    dtype: DType,
    activation: HeadActivation,
    lean: Option<usize>,
    logits_rounded: bool,
) -> Slack {
    let (u, eta) = half_roundoff(dtype).expect("a half-precision dtype");
    let dz_rounded = dtype == DType::BF16;
    let (b, i, c) = (data.batch, data.inputs, data.classes);
    let x = |r: usize, k: usize| data.x[r * i + k] as f64;
    let w = |j: usize, k: usize| data.weight[j * i + k] as f64;
    let relu = activation == HeadActivation::Relu;
    let scale = grad.abs() / b.max(1) as f64;
    let mut moved = Slack::zeros(b, i, c);
    let mut exact = moved.clone();
    // The lean mode's roundings of the running dW so far.
    let mut lean_moved = vec![0.0; c * i];
    let mut loss = 0.0;
    let mut loss_moved = 0.0;
    for r in 0..b {
        let (z, h, m, d) = exact_row(data, r, relu);
        let label = data.labels[r];
        let target = usize::try_from(label).unwrap_or(0).min(c.saturating_sub(1));
        loss += (d.ln() + m - h[target]) / b as f64;
        // Each logit's move by its rounding (rounded logits), and the row's largest.
        let logit_moves: Vec<f64> = (0..c)
            .map(|j| {
                if logits_rounded {
                    u * (z[j] - data.bias[j] as f64).abs() + eta
                } else {
                    0.0
                }
            })
            .collect();
        let e_row = logit_moves.iter().cloned().fold(0.0, f64::max);
        loss_moved += 2.0 * e_row / b as f64;
        for j in 0..c {
            let p = (h[j] - m).exp() / d;
            let onehot = if label == j as i64 { 1.0 } else { 0.0 };
            let dh = scale * (p - onehot);
            let dz = if !relu || z[j] > 0.0 { dh } else { 0.0 };
            // What the rounded logits move dZ by: the probability's factor where unmasked,
            // the whole of dH where the mask can flip.
            let logit_flip = relu && logits_rounded && z[j].abs() <= logit_moves[j];
            let from_logits = if !logits_rounded {
                0.0
            } else if logit_flip {
                dh.abs() + scale * p * ((2.0 * e_row).exp() - 1.0)
            } else if !relu || z[j] > 0.0 {
                scale * p * ((2.0 * e_row).exp() - 1.0)
            } else {
                0.0
            };
            let flip = if relu && z[j].abs() <= eta {
                dh.abs()
            } else {
                0.0
            };
            let e = if dz_rounded {
                from_logits + u * (dz.abs() + from_logits) + eta * grad.abs() + flip
            } else {
                0.0
            };
            exact.db[j] += dz;
            moved.db[j] += e;
            for k in 0..i {
                moved.dw[j * i + k] += e * x(r, k).abs();
                moved.dx[r * i + k] += e * w(j, k).abs();
                exact.dw[j * i + k] += dz * x(r, k);
                exact.dx[r * i + k] += dz * w(j, k);
            }
        }
        if let Some(rows) = lean
            && (r + 1) % rows == 0
            && r + 1 < b
        {
            for (e, (s, m)) in lean_moved.iter_mut().zip(exact.dw.iter().zip(&moved.dw)) {
                *e += u * (s.abs() + m + *e) + eta * grad.abs();
            }
        }
    }
    for (m, e) in moved.dw.iter_mut().zip(&lean_moved) {
        *m += e;
    }
    let rounded =
        |exact: f64, moved: f64| moved + (2.0 * u + u * u) * (exact.abs() + moved) + 2.0 * eta;
    let zip = |exact: &[f64], moved: &[f64]| -> Vec<f64> {
        exact
            .iter()
            .zip(moved)
            .map(|(&e, &m)| rounded(e, m))
            .collect()
    };
    Slack {
        loss: loss_moved + u * (loss.abs() + loss_moved) + eta,
        dx: zip(&exact.dx, &moved.dx),
        dw: zip(&exact.dw, &moved.dw),
        db: zip(&exact.db, &moved.db),
    }
}

/// What [`tf32_slack`] or [`half_slack`] allows, per element.
#[derive(Debug, Clone, PartialEq)]
pub struct Slack {
    /// On the mean loss.
    pub loss: f64,
    /// On dX `[B, I]`.
    pub dx: Vec<f64>,
    /// On dW `[C, I]`.
    pub dw: Vec<f64>,
    /// On db `[C]`.
    pub db: Vec<f64>,
}

impl Slack {
    /// No allowance, for B, I, C = `b`, `i`, `c`.
    fn zeros(b: usize, i: usize, c: usize) -> Self {
        Self {
            loss: 0.0,
            dx: vec![0.0; b * i],
            dw: vec![0.0; c * i],
            db: vec![0.0; c],
        }
    }
}

/// Every stage's output of one forward and backward pass, read back as f64.
#[derive(Debug, Clone, PartialEq)]
pub struct StageOutputs {
    /// Z `[B, C]`, row-major.
    pub z: Vec<f64>,
    /// H `[B, C]`.
    pub h: Vec<f64>,
    /// Per-row loss `[B]`.
    pub loss_rows: Vec<f64>,
    /// dH `[B, C]`.
    pub dh: Vec<f64>,
    /// dZ `[B, C]`.
    pub dz: Vec<f64>,
    /// dW `[C, I]`.
    pub dw: Vec<f64>,
    /// db `[C]`.
    pub db: Vec<f64>,
    /// dX `[B, I]`.
    pub dx: Vec<f64>,
    /// The mean loss.
    pub loss: f64,
}

impl StageOutputs {
    /// The eight gates of `self` against `reference`, in [`GATE_NAMES`] order.
    pub fn gates(&self, reference: &StageOutputs) -> Vec<GateReport> {
        let pairs: [(&Vec<f64>, &Vec<f64>); 8] = [
            (&self.z, &reference.z),
            (&self.h, &reference.h),
            (&self.loss_rows, &reference.loss_rows),
            (&self.dh, &reference.dh),
            (&self.dz, &reference.dz),
            (&self.dw, &reference.dw),
            (&self.db, &reference.db),
            (&self.dx, &reference.dx),
        ];
        GATE_NAMES
            .iter()
            .zip(pairs)
            .map(|(name, (got, want))| gate(name, got, want))
            .collect()
    }
}

/// Runs the six stages (and the mean) one by one on `B`, with upstream gradient `grad_loss`,
/// and reads every output back as f64.
pub fn run_stages<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    grad_loss: f64,
) -> StageOutputs {
    stages::<B>("run_stages", x, weight, bias, labels, grad_loss, None, true)
}

/// [`run_stages`] (exact), [`run_stages_tf32`] (TF32) or their identity-activation versions,
/// as `kernels` say. With [`HeadActivation::Identity`], H is Z and stage 3 is `dZ = dH g`
/// (stock ops); every other stage is the same.
pub fn run_stages_with<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    grad_loss: f64,
    kernels: KernelOptions,
) -> StageOutputs {
    let tf32 = (kernels.precision == HeadPrecision::Tf32).then_some(round_tf32 as fn(f64) -> f64);
    let relu = kernels.activation == HeadActivation::Relu;
    stages::<B>(
        "run_stages_with",
        x,
        weight,
        bias,
        labels,
        grad_loss,
        tf32,
        relu,
    )
}

/// [`run_stages`] with TF32's rounding emulated: each operand of the three products (X and W in
/// stage 1; dZ, X and W in stages 4 and 6) is rounded with [`round_tf32`] before the product,
/// which then runs in `B`'s precision. Run on `NdArray<f64>`, this is the reference of
/// [`HeadPrecision::Tf32`]: TF32 tensor cores multiply the rounded values
/// exactly and accumulate in f32, so the gates apply to them against it unchanged. The
/// bias, the softmax cross-entropy and db see unrounded values, as in the kernels.
pub fn run_stages_tf32<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    grad_loss: f64,
) -> StageOutputs {
    stages::<B>(
        "run_stages_tf32",
        x,
        weight,
        bias,
        labels,
        grad_loss,
        Some(round_tf32),
        true,
    )
}

/// [`run_stages_tf32`] with the operands truncated to TF32 ([`truncate_tf32`]) instead of
/// rounded to nearest: the reference of tensor cores that read f32 operands and ignore their
/// low 13 bits.
pub fn run_stages_tf32_truncated<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    grad_loss: f64,
) -> StageOutputs {
    let op = "run_stages_tf32_truncated";
    stages::<B>(
        op,
        x,
        weight,
        bias,
        labels,
        grad_loss,
        Some(truncate_tf32),
        true,
    )
}

/// `v` as f32 with its 13 low mantissa bits cleared (TF32 toward zero); NaN and the
/// infinities pass unchanged.
pub fn truncate_tf32(v: f64) -> f64 {
    let f = v as f32;
    if !f.is_finite() {
        return f as f64;
    }
    f32::from_bits(f.to_bits() & !0x1fff) as f64
}

/// The stages of [`run_stages`] (checked as `op`); with `tf32`, each operand of the three
/// products rounded by that rule first (see [`run_stages_tf32`]); without `relu`, the identity
/// activation (H = Z, `dZ = dH g`).
#[allow(clippy::too_many_arguments)]
fn stages<B: FusedHeadBackend>(
    op: &str,
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    grad_loss: f64,
    tf32: Option<fn(f64) -> f64>,
    relu: bool,
) -> StageOutputs {
    check_shapes(op, &x, &weight, &bias, &labels);
    let g = upstream_gradient(grad_loss, &x);
    let round = |t: Tensor<B, 2>| match tf32 {
        Some(rule) => tf32_rounded(t, rule),
        None => t,
    };
    let x = round(x).into_primitive().tensor(); // [B, I]
    let weight = round(weight).into_primitive().tensor(); // [C, I]
    let (z, h) =
        B::head_linear_relu_forward(x.clone(), weight.clone(), bias.into_primitive().tensor());
    let h = if relu { h } else { z.clone() };
    let (loss_rows, dh) = B::head_softmax_cross_entropy(h.clone(), labels.into_primitive());
    let loss = B::head_mean_loss(loss_rows.clone());
    let g = g.into_primitive().tensor();
    let dz = if relu {
        B::head_relu_backward(z.clone(), dh.clone(), g)
    } else {
        scaled::<B>(dh.clone(), g)
    };
    // dZ as the operand of dW and dX (db sums it unrounded, as the kernels do).
    let dz_operand = round(Tensor::from_primitive(TensorPrimitive::Float(dz.clone())))
        .into_primitive()
        .tensor(); // [B, C]
    StageOutputs {
        dw: read::<B>(B::head_weight_gradient(dz_operand.clone(), x)),
        db: read::<B>(B::head_bias_gradient(dz.clone())),
        dx: read::<B>(B::head_input_gradient(dz_operand, weight)),
        z: read::<B>(z),
        h: read::<B>(h),
        loss_rows: read::<B>(loss_rows),
        dh: read::<B>(dh),
        dz: read::<B>(dz),
        loss: read::<B>(loss)[0],
    }
}

/// `v` as f32, then rounded to TF32 as the op's TF32 kernels do: the 13 low mantissa bits
/// dropped, rounding to nearest with ties to even (the rule of Burn's TMA matmul path; CUDA's
/// `__float_to_tf32` rounds ties away). NaN and the infinities pass unchanged.
pub fn round_tf32(v: f64) -> f64 {
    let f = v as f32;
    if !f.is_finite() {
        return f as f64;
    }
    let bits = f.to_bits();
    f32::from_bits((bits + 0xfff + ((bits >> 13) & 1)) & !0x1fff) as f64
}

/// `t` with every element passed through `rule` (on the host; same device and dtype).
fn tf32_rounded<B: Backend, const D: usize>(t: Tensor<B, D>, rule: fn(f64) -> f64) -> Tensor<B, D> {
    let (shape, device, dtype) = (t.shape(), t.device(), t.dtype());
    let rounded: Vec<f64> = values(t).into_iter().map(rule).collect();
    Tensor::from_data(TensorData::new(rounded, shape), (&device, dtype))
}

/// The upstream gradient of the loss as a `[1]` tensor on `like`'s device and dtype.
fn upstream_gradient<B: Backend>(grad_loss: f64, like: &Tensor<B, 2>) -> Tensor<B, 1> {
    Tensor::from_data(
        TensorData::new(vec![grad_loss], [1]),
        (&like.device(), like.dtype()),
    )
}

/// A float primitive's values as f64, row-major.
fn read<B: FusedHeadBackend>(t: burn::tensor::ops::FloatTensor<B>) -> Vec<f64> {
    let n = t.shape().num_elements();
    let flat = B::float_reshape(t, Shape::new([n])); // [n]
    values(Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(flat)))
}

/// A tensor's values as f64, row-major (reads back from the device).
pub fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data()
        .convert_dtype(DType::F64)
        .to_vec::<f64>()
        .expect("f64 data")
}

/// The outputs of the fast path (`head_forward` then `head_backward`, as the op runs them under
/// autodiff), read back as f64. H, the per-row loss and dZ stay inside its kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct FastOutputs {
    /// Z `[B, C]`.
    pub z: Vec<f64>,
    /// dH `[B, C]`.
    pub dh: Vec<f64>,
    /// dW `[C, I]`.
    pub dw: Vec<f64>,
    /// db `[C]`.
    pub db: Vec<f64>,
    /// dX `[B, I]`.
    pub dx: Vec<f64>,
    /// The mean loss.
    pub loss: f64,
}

impl FastOutputs {
    /// The gates of the six outputs against a stage-by-stage `reference` (Z, loss, dH, dW, db,
    /// dX, named as in [`GATE_NAMES`]).
    pub fn gates(&self, reference: &StageOutputs) -> Vec<GateReport> {
        vec![
            gate("Z", &self.z, &reference.z),
            gate("loss", &[self.loss], &[reference.loss]),
            gate("dH", &self.dh, &reference.dh),
            gate("dW", &self.dw, &reference.dw),
            gate("db", &self.db, &reference.db),
            gate("dX", &self.dx, &reference.dx),
        ]
    }
}

/// Runs the fast path on `B` (`head_forward`, then `head_backward` with every gradient wanted)
/// with upstream gradient `grad_loss` and `kernels` (the precision and the activation), and
/// reads every output back as f64.
pub fn run_fast_path<B: FusedHeadBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
    grad_loss: f64,
    kernels: KernelOptions,
) -> FastOutputs {
    check_shapes("run_fast_path", &x, &weight, &bias, &labels);
    let g = upstream_gradient(grad_loss, &x);
    let x = x.into_primitive().tensor(); // [B, I]
    let weight = weight.into_primitive().tensor(); // [C, I]
    let fwd = B::head_forward(
        x.clone(),
        weight.clone(),
        bias.into_primitive().tensor(),
        labels.into_primitive(),
        kernels,
    );
    let grads = B::head_backward(
        x,
        weight,
        fwd.z.clone(),
        fwd.dh.clone(),
        g.into_primitive().tensor(),
        HeadWanted::ALL,
        kernels,
    );
    let wanted = |t: Option<burn::tensor::ops::FloatTensor<B>>| read::<B>(t.expect("wanted"));
    FastOutputs {
        z: read::<B>(fwd.z),
        dh: read::<B>(fwd.dh),
        dw: wanted(grads.weight),
        db: wanted(grads.bias),
        dx: wanted(grads.x),
        loss: read::<B>(fwd.loss)[0],
    }
}

/// Panics, naming `op`, where X `[B, I]`, W `[C, I]`, b `[C]` and the targets `[B]` do not
/// fit together (the stage methods take them as given).
fn check_shapes<B: Backend>(
    op: &str,
    x: &Tensor<B, 2>,
    weight: &Tensor<B, 2>,
    bias: &Tensor<B, 1>,
    targets: &Tensor<B, 1, Int>,
) {
    let ([batch, inputs], [classes, w_inputs]) = (x.dims(), weight.dims());
    assert!(
        inputs == w_inputs && bias.dims() == [classes] && targets.dims() == [batch],
        "{op}: X {:?}, W {:?}, b {:?} and targets {:?} must be [B, I], [C, I], [C] and [B]",
        x.dims(),
        weight.dims(),
        bias.dims(),
        targets.dims()
    );
}

/// `dH g` `[B, C]` (the identity's stage 3), g `[1]` the upstream gradient: stock ops.
fn scaled<B: Backend>(
    dh: burn::tensor::ops::FloatTensor<B>,
    grad_loss: burn::tensor::ops::FloatTensor<B>,
) -> burn::tensor::ops::FloatTensor<B> {
    let dh = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(dh)); // [B, C]
    if dh.shape().num_elements() == 0 {
        return dh.into_primitive().tensor(); // [0, C]: broadcasting against g would make it [1, C]
    }
    let g = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(grad_loss)).unsqueeze_dim::<2>(0); // [1, 1]
    (dh * g).into_primitive().tensor()
}

#[cfg(test)]
mod tests {
    use super::{HeadActivation, Slack, half_slack, round_tf32, rounded_logits_slack};
    use crate::reference::HeadData;
    use burn::tensor::DType;

    /// One training step in f64 with the op's bf16 roundings where `rounded` (each logit
    /// product, dZ, the outputs, and again where the upstream gradient `grad` scales them),
    /// exact without: `[loss], dX, dW, db` as one vector.
    fn simulated(data: &HeadData, grad: f64, relu: bool, rounded: bool) -> Vec<f64> {
        simulated_in_chunks(data, grad, relu, rounded, None)
    }

    /// [`simulated`], with dW's running sum rounded after every chunk of `lean` rows but the
    /// last where given (the lean mode).
    fn simulated_in_chunks(
        data: &HeadData,
        grad: f64,
        relu: bool,
        rounded: bool,
        lean: Option<usize>,
    ) -> Vec<f64> {
        let r = |v: f64| {
            if rounded {
                burn::tensor::bf16::from_f64(v).to_f64()
            } else {
                v
            }
        };
        let (b, i, c) = (data.batch, data.inputs, data.classes);
        let (mut dx, mut dw, mut db) = (vec![0.0; b * i], vec![0.0; c * i], vec![0.0; c]);
        let mut loss = 0.0;
        for row in 0..b {
            let x = &data.x[row * i..(row + 1) * i];
            let (z, h, m, d) = super::row_with(data, row, relu, r);
            let label = data.labels[row] as usize;
            loss += (d.ln() + m - h[label]) / b as f64;
            for j in 0..c {
                let p = (h[j] - m).exp() / d;
                let onehot = if j == label { 1.0 } else { 0.0 };
                let dz = if !relu || z[j] > 0.0 {
                    r((p - onehot) / b as f64)
                } else {
                    0.0
                };
                db[j] += dz;
                for k in 0..i {
                    dx[row * i + k] += dz * data.weight[j * i + k] as f64;
                    dw[j * i + k] += dz * x[k] as f64;
                }
            }
            if let Some(rows) = lean
                && (row + 1) % rows == 0
                && row + 1 < b
            {
                dw.iter_mut().for_each(|v| *v = r(*v));
            }
        }
        let scaled = |v: Vec<f64>| -> Vec<f64> {
            v.into_iter()
                .map(|v| if grad == 1.0 { r(v) } else { r(r(v) * grad) })
                .collect()
        };
        [vec![r(loss)], scaled(dx), scaled(dw), scaled(db)].concat()
    }

    /// How many elements of `got` are off `want` by more than `slack`.
    fn outside(got: &[f64], want: &[f64], slack: &Slack) -> usize {
        let bound = [
            vec![slack.loss],
            slack.dx.clone(),
            slack.dw.clone(),
            slack.db.clone(),
        ]
        .concat();
        got.iter()
            .zip(want)
            .zip(&bound)
            .filter(|((g, w), b)| (*g - *w).abs() > **b)
            .count()
    }

    /// The rounded-logits bound holds for the step it models, simulated in f64 with every
    /// rounding (no f32 sums, so the bound alone must cover it), at logits large enough that
    /// their rounding shows, both activations and two upstream gradients; and the bf16 bound
    /// without the logits' term does not (the term is needed).
    #[test]
    fn rounded_logits_slack_covers_the_step_it_models() {
        let mut data = HeadData::random(7, 29, 24, 40);
        for w in &mut data.weight {
            *w *= 6.0;
        }
        let data = data.rounded_to(DType::BF16);
        let mut short = 0;
        for (activation, grad) in [
            (HeadActivation::Relu, 1.0),
            (HeadActivation::Identity, 1.0),
            (HeadActivation::Relu, 0.5),
        ] {
            let relu = activation == HeadActivation::Relu;
            let want = simulated(&data, grad, relu, false);
            let got = simulated(&data, grad, relu, true);
            let slack = rounded_logits_slack(&data, grad, activation, None);
            assert_eq!(outside(&got, &want, &slack), 0, "{activation:?} g={grad}");
            // The lean mode: dW's running sum rounded after every chunk of 7 rows but the last.
            let got = simulated_in_chunks(&data, grad, relu, true, Some(7));
            let slack = rounded_logits_slack(&data, grad, activation, Some(7));
            assert_eq!(
                outside(&got, &want, &slack),
                0,
                "lean, {activation:?} g={grad}"
            );
            short += outside(
                &got,
                &want,
                &half_slack(&data, grad, DType::BF16, activation),
            );
        }
        assert!(short > 0, "the bf16 bound alone covers rounded logits here");
    }

    #[test]
    fn round_tf32_keeps_ten_mantissa_bits_ties_to_even() {
        let ulp = 2f64.powi(-10); // TF32's spacing in [1, 2)
        assert_eq!(round_tf32(1.0), 1.0);
        assert_eq!(round_tf32(1.0 + ulp), 1.0 + ulp);
        // Below half an ulp rounds down, above it up; a tie goes to the even neighbour.
        assert_eq!(round_tf32(1.0 + ulp / 2.0 - 2f64.powi(-23)), 1.0);
        assert_eq!(round_tf32(1.0 + ulp / 2.0 + 2f64.powi(-23)), 1.0 + ulp);
        assert_eq!(round_tf32(1.0 + ulp / 2.0), 1.0);
        assert_eq!(round_tf32(-(1.0 + ulp / 2.0)), -1.0);
        assert_eq!(round_tf32(1.0 + 1.5 * ulp), 1.0 + 2.0 * ulp);
        assert_eq!(round_tf32(-(1.0 + 1.5 * ulp)), -(1.0 + 2.0 * ulp));
        // A carry into the exponent, and values that pass unchanged.
        assert_eq!(round_tf32(2.0 - ulp / 4.0), 2.0);
        assert_eq!(round_tf32(0.0), 0.0);
        assert!(round_tf32(f64::NAN).is_nan());
        assert_eq!(round_tf32(f64::INFINITY), f64::INFINITY);
    }
}
