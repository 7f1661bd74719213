//! # burn-fused-head
//!
//! `nn::Linear` and a softmax cross-entropy fused into one op for [Burn](https://burn.dev),
//! forward and backward, as CubeCL kernels on Burn's CubeCL backends (CUDA, wgpu/Vulkan) and
//! stock Burn ops everywhere else:
//!
//! ```text
//! Z    = X W^T + b            X [B, I], W stored [C, I], b [C], Z [B, C]
//! H    = act(Z)               the identity (default) or ReLU, H [B, C]
//! loss = mean_r cross_entropy(softmax(H[r]), targets[r])      targets [B], loss [1]
//! ```
//!
//! with PyTorch's cross-entropy options (ignored targets, class weights, label smoothing, the
//! mean, sum or per-row losses) and a language model's (a logit scale, softcapping, the
//! z-loss, each row's log-sum-exp, target log-probability and entropy). Where the classes are many (C > 32 on the CubeCL backends) the
//! logits `[B, C]` are never held in memory: the batch is streamed in chunks of rows and the
//! gradients come out of the forward pass.
//!
//! Letters, used everywhere in the crate: **B** (batch), **I** (inputs), **C** (classes).
//!
//! ## Use
//! - [`FusedLinearCrossEntropyConfig`] / [`FusedLinearCrossEntropy`]: the op as a `Module`
//!   shaped as `nn::Linear` (`forward` gives the logits, `forward_loss` the loss,
//!   `forward_loss_and_predictions` the loss and each row's class); `From<nn::Linear>` switches
//!   an existing model in one line.
//! - [`fused_linear_cross_entropy`] (and [`fused_linear_cross_entropy_and_predictions`],
//!   [`fused_linear_cross_entropy_with_token_stats`]): the op on tensors, for a weight you hold
//!   yourself (tied to an embedding, say).
//! - [`HeadOptions`]: every option of both, in one value.
//! - [`FusedHeadBackend`]: the backend bound of both; implemented for Burn's backends (CUDA
//!   and wgpu with their features, NdArray always, Flex and Candle with theirs) and for
//!   `Autodiff` and `Fusion` over them. Its methods and their types are in [`backend`].
//!
//! ```
//! use burn::backend::{Autodiff, NdArray};
//! use burn::tensor::{Distribution, Int, Tensor};
//! use burn_fused_head::FusedLinearCrossEntropyConfig;
//!
//! type B = Autodiff<NdArray>;
//! let device = Default::default();
//! let head = FusedLinearCrossEntropyConfig::new(64, 1000)
//!     .with_ignore_index(Some(-100))
//!     .init::<B>(&device);
//! let x = Tensor::<B, 2>::random([8, 64], Distribution::Normal(0.0, 1.0), &device); // [B, I]
//! let targets = Tensor::<B, 1, Int>::from_ints([3, 1, -100, 999, 0, 5, 7, 2], &device); // [B]
//! let loss = head.forward_loss(x, targets); // [1]
//! let grads = loss.backward();
//! ```

#![warn(missing_docs)]

mod autodiff;
pub mod backend;
#[cfg(feature = "cube")]
mod cube;
#[cfg(feature = "cube")]
mod fusion;
mod module;
mod ops;
mod options;
mod pairwise;
mod rows;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod validate;

pub use backend::FusedHeadBackend;
pub use module::{FusedLinearCrossEntropy, FusedLinearCrossEntropyConfig};
pub use ops::{
    TargetError, TokenStats, fused_linear_cross_entropy,
    fused_linear_cross_entropy_and_predictions, fused_linear_cross_entropy_with_token_stats,
    validate_targets,
};
pub use options::{
    HeadAccumulation, HeadActivation, HeadLogits, HeadOptions, HeadPrecision, HeadReduction,
};
