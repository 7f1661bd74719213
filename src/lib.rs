//! # burn-fused-head
//!
//! One fused operation for [Burn](https://burn.dev): the classifier head
//!
//! ```text
//! Z    = X W^T + b            X [B, I], W stored [C, I], b [C], Z [B, C]
//! H    = ReLU(Z)              H [B, C]
//! loss = mean_r cross_entropy(softmax(H[r]), labels[r])      labels [B], loss [1]
//! ```
//!
//! forward and backward, as CubeCL kernels registered as a custom op on Burn's CubeCL backends
//! (CUDA, wgpu/Vulkan), with an [`Autodiff`](burn::backend::Autodiff) impl so that
//! `loss.backward()` reaches X, W and b.
//!
//! Letters, used everywhere in the crate: **B** (batch), **I** (inputs), **C** (classes).
//!
//! ## Use
//! - [`linear_relu_cross_entropy`]: the op as a function on tensors;
//!   [`linear_relu_cross_entropy_with`] takes a [`HeadPrecision`] (exact f32 by default, or
//!   TF32 tensor cores for the large-C products where the device has them).
//! - [`HeadActivation`]: ReLU (the default) or the identity, which makes the op `Linear` +
//!   `CrossEntropyLoss`; [`HeadOptions`] holds it with the precision.
//! - [`linear_relu_cross_entropy_and_predictions`]: the loss and each row's predicted class in
//!   one call (for metrics), with no second product.
//! - [`FusedHead`] / [`FusedHeadConfig`]: the op as a [`Module`](burn::module::Module) with
//!   `weight` `[C, I]` and `bias` `[C]` parameters.
//! - [`FusedHeadBackend`]: the backend extension trait. Every stage has a default body built from
//!   stock Burn ops, so `NdArray` runs the op (and, in f64, is the independent reference); the
//!   CubeCL backends (`cuda`, `wgpu` features) replace the bodies with kernels.
//! - [`gates`]: the seed's element-wise gates `|got - ref| <= 2e-5 + 2e-4 |ref|`, per stage.
//!
//! ## The six stages
//! 1. `linear_relu_forward`: Z and H.
//! 2. `softmax_cross_entropy`: per-row loss and `dH = (p - onehot) / B` from the same p.
//! 3. `relu_backward`: `dZ = dH [Z > 0] g`, g the upstream gradient of the loss.
//! 4. `weight_gradient`: `dW = dZ^T X` `[C, I]`.
//! 5. `bias_gradient`: `db = column_sum(dZ)` `[C]`.
//! 6. `input_gradient`: `dX = dZ W` `[B, I]`.
//!
//! plus `mean_loss`, the deterministic batch mean of the per-row losses.
//!
//! These are the readable reference. The op itself runs the fast path,
//! [`FusedHeadBackend::head_forward`] and [`FusedHeadBackend::head_backward`], which the CubeCL
//! backends implement with fused kernels for C <= 32 and tiled exact-f32 products above (or
//! TF32 tensor-core products, with [`HeadPrecision::Tf32`]); the tests gate every path against
//! the f64 reference (for TF32, one that rounds the products' operands as TF32 does).

mod autodiff;
mod backend;
#[cfg(feature = "cube")]
mod cube;
#[cfg(feature = "cube")]
mod fusion;
pub mod gates;
mod loss;
mod module;
mod ops;
pub mod reference;
pub mod testing;
mod validate;
#[cfg(feature = "wgpu")]
pub mod vulkan;

pub use backend::{
    FusedHeadBackend, HeadActivation, HeadForward, HeadGradients, HeadLimits, HeadOptions,
    HeadPrecision, HeadWanted,
};
pub use loss::{HeadLoss, HeadReduction};
pub use module::{FusedHead, FusedHeadConfig};
pub use ops::{
    LabelError, linear_relu_cross_entropy, linear_relu_cross_entropy_and_predictions,
    linear_relu_cross_entropy_and_predictions_with, linear_relu_cross_entropy_loss,
    linear_relu_cross_entropy_with, linear_relu_logits, linear_relu_logits_with, validate_labels,
};
