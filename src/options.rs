//! What a user asks of the op: [`HeadOptions`], the one options value of the module and the
//! functions, and the part of it the kernels read ([`KernelOptions`]).
//!
//! For a row r with target y, log-probabilities `lp = log_softmax(H[r])`, class weights w
//! (ones without), smoothing e and C classes, the loss is PyTorch's `cross_entropy`:
//!
//! ```text
//! L[r] = (1 - e) w[y] (-lp[y]) + (e / C) sum_c w[c] (-lp[c])       (0 for an ignored row)
//! mean = sum_r L[r] / sum_r w[y_r]   (over the rows not ignored)   sum = sum_r L[r]   none = L
//! ```
//!
//! The LM terms change the logits the softmax sees and add the z-loss: `H = s act(Z)`, then
//! `cap tanh(H / cap)` with a softcap, and `L[r] += zeta lse[r]^2` for a row not ignored.

/// The activation between the linear layer and the softmax: `H = act(X W^T + b)`.
///
/// `Identity` (the default) applies the cross-entropy to the logits `X W^T + b` themselves,
/// as Burn's `Linear` + `CrossEntropyLoss`, PyTorch's `cross_entropy(linear(x))` and every LM
/// head do. `Relu` puts a ReLU on the logits first. Each kernel is compiled once per
/// activation (a compile-time choice inside it, no per-element branch).
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadActivation {
    /// `H = Z`; `dZ = dH`.
    Identity,
    /// `H = ReLU(Z)`; `dZ = dH [Z > 0]`: the subgradient at `Z = 0` is 0, and a NaN Z lets
    /// its (NaN) gradient through. A row whose logits are all `<= 0` gets no gradient: with
    /// this activation, a bias initialised to 1 keeps rows from starting dead
    /// ([`FusedLinearCrossEntropyConfig::with_bias_initializer`](crate::FusedLinearCrossEntropyConfig)).
    Relu,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadActivation {
    fn default() -> Self {
        Self::Identity
    }
}

/// How the large-C products (C > 32 on the CubeCL backends) are computed.
///
/// A permission, as PyTorch's `allow_tf32`: where the device has no TF32 tensor cores
/// ([`FusedHeadBackend::head_tf32_available`](crate::FusedHeadBackend::head_tf32_available)
/// is false), on the small-C path (memory-bound, where tensor cores gain nothing), for bf16
/// tensors and on the stock-op backends, the op runs `Exact`.
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadPrecision {
    /// f32 products with FMA: within `|got - ref| <= 2e-5 + 2e-4 |ref|` of the f64 reference,
    /// element-wise.
    Exact,
    /// TF32 tensor cores for the three large-C products (`X W^T`, `dZ^T X`, `dZ W`): each
    /// operand keeps 10 bits of mantissa, the products are exact and summed in f32. What is
    /// done depends on the engine, and so does the bound that holds:
    /// - the training step and the loss at C > 32 on CUDA run on NVIDIA's cuBLASLt, whose
    ///   rounding of the operands is not documented (on the H200 it matched truncation, not
    ///   rounding to nearest); the bound is the exact one plus what operands with a relative
    ///   error of 2^-10 (truncation, the worst rule) can move each element;
    /// - the logits, the forward and backward halves, and every product on wgpu or where
    ///   cuBLASLt does not load run on this crate's CubeCL kernels (or cubek's), which round
    ///   to nearest, ties to even; the bound is the exact one against an f64 reference whose
    ///   operands are rounded the same way.
    ///
    /// DESIGN.md, "TF32: rounding and gate", has the derivation.
    Tf32,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadPrecision {
    fn default() -> Self {
        Self::Exact
    }
}

/// How the streamed path (C > 32 on the CubeCL backends, training) sums the weight gradient
/// over its chunks of rows: the memory it holds against the rounding it adds, for bf16 tensors.
///
/// f32 tensors accumulate in f32 either way; `Lean` only gives them the smaller chunks. C <= 32,
/// the stock-op backends (NdArray, Flex, Candle) and a call without dW have no chunks to sum
/// over and do the same under both.
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadAccumulation {
    /// dW and db are summed in f32 and rounded to the gradient's type once, at the end. bf16
    /// holds an f32 `[C, I]` (or, where `B <= 2 I`, the whole batch's bf16 dZ `[B, C]`, no
    /// larger) beyond the inputs and gradients: at most `4 C I` bytes + 256 MiB.
    F32,
    /// dW is summed in the gradient's own type: each chunk's product reads the running bf16 dW,
    /// adds its part in f32 and rounds the sum to bf16 (Liger-Kernel's fused loss does the
    /// same), and the chunks are smaller (32 Mi elements, so 1024 rows at C = 32000 and 256
    /// at C = 128256; with [`HeadLogits::Rounded`], whose chunk takes a third of the bytes per
    /// element, 96 Mi: 3072 and 768 rows). On cuBLASLt the path then holds its chunk buffers (at most 192 MiB in
    /// bf16, 128 MiB in f32, plus X's transposed chunk with TF32, at most 32 MiB), cuBLASLt's
    /// 32 MiB workspace and its per-row and per-class vectors (`4 B` and `4 C` bytes each, a
    /// few of them) beyond the inputs and gradients: under 256 MiB while those vectors take
    /// under 32 MiB, as at (8192, 4096, 32000) and (8192, 4096, 128256). The price
    /// is one rounding of dW per chunk, `u = 2^-8` of the running sum each (the bound is
    /// `gates::lean_slack` in the testing crate), and more passes over dW. db stays an f32 sum
    /// (`4 C` bytes). The CubeCL products (no cuBLASLt) also hold a `[C, I]` partial of each
    /// chunk's dW while it is added.
    Lean,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadAccumulation {
    fn default() -> Self {
        Self::F32
    }
}

/// What the streamed path (C > 32 on CUDA with cuBLASLt, bf16 tensors) gives the softmax: the
/// logits product's f32 sums, or those sums rounded to bf16 first, as PyTorch's and
/// Liger-Kernel's bf16 heads do.
///
/// `Rounded` trades one rounding of each logit for fewer bytes: the product writes P = X W^T
/// in bf16, the row kernel reads it (twice) and writes dZ over it in bf16, and db sums that
/// rounded dZ, where `F32` writes and reads P in f32 and also writes an f32 dZ for db. Where
/// the whole batch's dZ is kept (`HeadAccumulation::F32`, dW wanted, `B <= 2 I`), P is written
/// into that dZ buffer, so the path holds no chunk buffer at all and takes the batch in one
/// chunk unless `chunk_elements` is given. The predictions and the per-row statistics then
/// come from the rounded logits too (ties, the lower class winning, are likelier). Its error
/// beyond the bf16 bound: each
/// logit moves by at most `u |P| + eta` (`u = 2^-8`), a row's loss by twice its largest such
/// move, its probabilities by the factor `exp(2 max)` (`gates::rounded_logits_slack` in the
/// testing crate has the bound, gated on CUDA). f32 and f16 tensors, C <= 32, the stock-op
/// backends (NdArray, Flex, Candle) and every backend but CUDA with cuBLASLt keep the f32
/// logits under both (bf16 at C > 32 elsewhere runs the f32 kernels on its inputs cast up).
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadLogits {
    /// The softmax reads the logits product's f32 sums.
    F32,
    /// The logits product's sums are rounded to bf16 before the softmax reads them (bf16
    /// tensors on CUDA with cuBLASLt at C > 32; see [`HeadLogits`]).
    Rounded,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadLogits {
    fn default() -> Self {
        Self::F32
    }
}

/// How the per-row losses become the result: PyTorch's `reduction`.
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq)]
pub enum HeadReduction {
    /// `sum_r L[r] / sum_r w[y_r]` over the rows that are not ignored (the plain mean over
    /// those rows without class weights), `[1]`. Every row ignored gives NaN (0 / 0), as PyTorch.
    Mean,
    /// `sum_r L[r]`, `[1]`.
    Sum,
    /// `L` itself, one loss per row (0 for an ignored row), `[N]` for N rows.
    None,
}

// Written out: Burn's `Config` derive on an enum rejects the `#[default]` variant attribute.
#[allow(clippy::derivable_impls)]
impl Default for HeadReduction {
    fn default() -> Self {
        Self::Mean
    }
}

/// The options of the op: the activation and the precision of the products, the
/// cross-entropy options of Burn's `CrossEntropyLossConfig` and PyTorch's `cross_entropy`
/// (with PyTorch's semantics), and the streamed path's chunk budget. The default is
/// `Linear` + `CrossEntropyLoss`: identity, exact f32, the mean over every row.
///
/// ```
/// use burn_fused_head::{HeadActivation, HeadOptions, HeadPrecision, HeadReduction};
///
/// let options = HeadOptions::new()
///     .with_activation(HeadActivation::Relu)
///     .with_precision(HeadPrecision::Tf32)
///     .with_ignore_index(Some(-100))
///     .with_class_weights(Some(vec![1.0, 2.0, 0.5]))
///     .with_smoothing(Some(0.1))
///     .with_reduction(HeadReduction::Sum);
/// assert!(!options.is_plain());
/// assert!(HeadOptions::new().with_activation(HeadActivation::Relu).is_plain());
/// ```
///
/// An ignored row (its target is `ignore_index` or one of `pad_tokens`) has no loss and no
/// gradient (a zero one; NaN where its own logits hold a NaN or an infinity, as PyTorch's)
/// and is left out of the mean's denominator, as PyTorch's `ignore_index`. (Burn 0.21's own
/// `CrossEntropyLoss` leaves pad rows in its denominator, Burn issue #5568; this crate follows
/// PyTorch so that the loss does not depend on how much padding a batch has.)
#[derive(burn::config::Config, Debug, PartialEq)]
pub struct HeadOptions {
    /// See [`HeadActivation`]. Default: the identity.
    #[config(default = "HeadActivation::Identity")]
    pub activation: HeadActivation,
    /// See [`HeadPrecision`]. Default: exact f32.
    #[config(default = "HeadPrecision::Exact")]
    pub precision: HeadPrecision,
    /// PyTorch's `ignore_index`: rows with this target are ignored (it may be outside
    /// `[0, C)`, as PyTorch's usual -100). Default: none.
    pub ignore_index: Option<i64>,
    /// Burn's `pad_tokens`: rows whose target is one of these classes are ignored. Default:
    /// none.
    pub pad_tokens: Option<Vec<usize>>,
    /// One weight per class, `[C]`, as PyTorch's `weight`: row r's loss is scaled by
    /// `class_weights[targets[r]]` and the mean divides by the sum of those. Finite. Default:
    /// all 1.
    pub class_weights: Option<Vec<f32>>,
    /// Label smoothing e in `[0, 1]`: the target distribution is `(1 - e) onehot + e / C`,
    /// as PyTorch's `label_smoothing`. Default: none (0).
    pub smoothing: Option<f32>,
    /// See [`HeadReduction`]. Default: the mean.
    #[config(default = "HeadReduction::Mean")]
    pub reduction: HeadReduction,
    /// A factor s on the logits before the softmax: `H = s act(Z)` (a temperature `1 / T`, or
    /// muP's output multiplier). Finite. Default: none (1).
    pub logit_scale: Option<f32>,
    /// Logit softcapping (Gemma 2): `H = cap tanh(H / cap)` after the scale, so that every
    /// logit the softmax sees is in `(-cap, cap)`. Finite and > 0. Default: none.
    pub softcap: Option<f32>,
    /// The z-loss's scale zeta (PaLM; Liger's `lse_square_scale`): each row not ignored adds
    /// `zeta lse[r]^2` to its loss, `lse[r] = log sum_c exp(H[r, c])`, which keeps the
    /// softmax's normaliser near 1. Unweighted by the class weights; the mean divides it by the
    /// same denominator as the rest. Finite and >= 0. Default: none (0).
    pub z_loss: Option<f32>,
    /// The most elements of the streamed path's chunk buffer `[rows, C]` (C > 32 on the
    /// CubeCL backends): less memory, more passes over dW. At least 1; below C, chunks of one
    /// row. Default: the path's own rule (64 Mi elements, 128 Mi from C = 65536; bf16's modes
    /// have their own: [`HeadAccumulation`], [`HeadLogits`]). The bits of the result depend on
    /// it (dW and db are summed chunk by chunk), never on the call.
    pub chunk_elements: Option<usize>,
    /// See [`HeadAccumulation`]. Default: f32. A `chunk_elements` given replaces the lean
    /// mode's chunk budget too.
    #[config(default = "HeadAccumulation::F32")]
    pub accumulation: HeadAccumulation,
    /// See [`HeadLogits`]. Default: f32.
    #[config(default = "HeadLogits::F32")]
    pub logits: HeadLogits,
}

impl Default for HeadOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl HeadOptions {
    /// Whether the loss is the plain mean cross-entropy over every row (no ignored target, no
    /// class weights, no smoothing, the mean, no logit scale, softcap or z-loss), the op's
    /// fused kernels' own semantics.
    pub fn is_plain(&self) -> bool {
        self.is_plain_but_logit_terms() && !self.has_logit_terms()
    }

    /// Whether the loss is the plain mean cross-entropy over every row but for a logit scale,
    /// a softcap and a z-loss: the terms the streamed path takes without row weights.
    pub(crate) fn is_plain_but_logit_terms(&self) -> bool {
        self.ignore_index.is_none()
            && self.pad_tokens.as_ref().is_none_or(|t| t.is_empty())
            && self.class_weights.is_none()
            && self.smoothing.is_none_or(|e| e == 0.0)
            && self.reduction == HeadReduction::Mean
    }

    /// Whether a logit scale, a softcap or a z-loss is set (the op's own fused kernels do not
    /// compute them: they take the options' routes, streamed or materialized).
    pub(crate) fn has_logit_terms(&self) -> bool {
        self.logit_scale.is_some_and(|s| s != 1.0)
            || self.softcap.is_some()
            || self.z_loss.is_some_and(|z| z != 0.0)
    }

    /// What the row algebra reads of these options, with the per-token statistics or without.
    pub(crate) fn row_terms(&self, token_stats: bool) -> RowTerms {
        RowTerms {
            activation: self.activation,
            smoothing: self.smoothing.unwrap_or(0.0),
            logit_scale: self.logit_scale.unwrap_or(1.0),
            softcap: self.softcap,
            z_loss: self.z_loss.unwrap_or(0.0),
            token_stats,
        }
    }

    /// What the kernels read of these options.
    pub fn kernels(&self) -> KernelOptions {
        KernelOptions {
            activation: self.activation,
            precision: self.precision,
            chunk_elements: self.chunk_elements,
            accumulation: self.accumulation,
            logits: self.logits,
        }
    }

    /// Label smoothing e, 0 without.
    pub(crate) fn epsilon(&self) -> f64 {
        self.smoothing.unwrap_or(0.0) as f64
    }

    /// Panics, naming `op`, on class weights that are not `[C]` or not finite, a smoothing
    /// outside `[0, 1]` or a chunk budget of 0.
    pub(crate) fn check(&self, op: &str, classes: usize) {
        if let Some(w) = &self.class_weights {
            assert!(
                w.len() == classes,
                "{op}: HeadOptions::class_weights has {} values; it must have one per class, C = {classes}",
                w.len()
            );
            assert!(
                w.iter().all(|v| v.is_finite()),
                "{op}: HeadOptions::class_weights must be finite"
            );
        }
        if let Some(e) = self.smoothing {
            assert!(
                (0.0..=1.0).contains(&e),
                "{op}: HeadOptions::smoothing must be in [0, 1], got {e}"
            );
        }
        if let Some(s) = self.logit_scale {
            assert!(
                s.is_finite(),
                "{op}: HeadOptions::logit_scale must be finite, got {s}"
            );
        }
        if let Some(cap) = self.softcap {
            assert!(
                cap.is_finite() && cap > 0.0,
                "{op}: HeadOptions::softcap must be finite and > 0, got {cap}"
            );
        }
        if let Some(z) = self.z_loss {
            assert!(
                z.is_finite() && z >= 0.0,
                "{op}: HeadOptions::z_loss must be finite and >= 0, got {z}"
            );
        }
        assert!(
            self.chunk_elements != Some(0),
            "{op}: HeadOptions::chunk_elements must be at least 1"
        );
    }
}

impl From<HeadActivation> for HeadOptions {
    fn from(activation: HeadActivation) -> Self {
        Self::new().with_activation(activation)
    }
}

impl From<HeadPrecision> for HeadOptions {
    fn from(precision: HeadPrecision) -> Self {
        Self::new().with_precision(precision)
    }
}

/// The part of [`HeadOptions`] the kernels read: the activation, the precision of the
/// large-C products, the streamed path's chunk budget, its accumulation and its logits. The backend extension
/// trait's fused methods take it; the cross-entropy options are applied around them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelOptions {
    /// See [`HeadActivation`].
    pub activation: HeadActivation,
    /// See [`HeadPrecision`].
    pub precision: HeadPrecision,
    /// See [`HeadOptions::chunk_elements`].
    pub chunk_elements: Option<usize>,
    /// See [`HeadAccumulation`].
    pub accumulation: HeadAccumulation,
    /// See [`HeadLogits`].
    pub logits: HeadLogits,
}

impl KernelOptions {
    /// Whether the activation is ReLU (the kernels' compile-time flag).
    #[cfg(feature = "cube")]
    pub(crate) fn relu(self) -> bool {
        self.activation == HeadActivation::Relu
    }

    /// These options with `precision`.
    pub fn with_precision(self, precision: HeadPrecision) -> Self {
        Self { precision, ..self }
    }

    /// These options with `activation`.
    pub fn with_activation(self, activation: HeadActivation) -> Self {
        Self { activation, ..self }
    }
}

/// What the row algebra ([`FusedHeadBackend::head_row_losses`](crate::FusedHeadBackend::head_row_losses))
/// reads of [`HeadOptions`]: for row r with `A = act(Z[r])`,
///
/// ```text
/// H    = s A, then cap tanh(H / cap) with a softcap      the logits the softmax sees
/// L[r] = (1 - e) w[y] (-lp[y]) + (e / C) sum_c w[c] (-lp[c]) + zeta lse^2     (0 if ignored)
/// ```
///
/// `lp = H - lse`, `lse = log sum_c exp(H[c])`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowTerms {
    /// See [`HeadActivation`].
    pub activation: HeadActivation,
    /// Label smoothing e, 0 for none.
    pub smoothing: f32,
    /// The logit scale s, 1 for none.
    pub logit_scale: f32,
    /// The softcap, if any.
    pub softcap: Option<f32>,
    /// The z-loss's scale zeta, 0 for none.
    pub z_loss: f32,
    /// Whether to return each row's log-sum-exp, log-probability of its target and entropy.
    pub token_stats: bool,
}

impl RowTerms {
    /// The plain cross-entropy's terms after `activation`: no smoothing, no logit term, no
    /// statistics.
    pub fn new(activation: HeadActivation) -> Self {
        Self {
            activation,
            smoothing: 0.0,
            logit_scale: 1.0,
            softcap: None,
            z_loss: 0.0,
            token_stats: false,
        }
    }

    /// These terms after `activation`.
    pub fn with_activation(self, activation: HeadActivation) -> Self {
        Self { activation, ..self }
    }

    /// Whether the row pass computes each row's statistics: asked for, or needed by the
    /// z-loss (its term `zeta lse^2` is added from the log-sum-exp).
    pub(crate) fn wants_stats(&self) -> bool {
        self.token_stats || self.z_loss != 0.0
    }

    /// Whether these are the plain cross-entropy's terms (activation and smoothing aside): no
    /// logit scale, softcap, z-loss or statistics.
    pub(crate) fn is_plain(&self) -> bool {
        self.logit_scale == 1.0 && self.softcap.is_none() && !self.wants_stats()
    }

    /// Whether a step may take these terms without row weights: a logit scale, a softcap, a
    /// z-loss and the statistics (no smoothing). See [`crate::HeadStep::terms`].
    pub(crate) fn go_unweighted(&self) -> bool {
        self.smoothing == 0.0
    }
}
