//! What `burn-fused-head` is checked and measured against, shared by its tests, examples,
//! benchmark and tools: not part of the crate a model uses.
//!
//! - [`reference`]: inputs that are identical on every backend, and Burn's stock head.
//! - [`gates`]: the element-wise gates `|got - ref| <= 2e-5 + 2e-4 |ref|`, the six stages run
//!   one by one on any backend (on `NdArray<f64>`, the independent reference), and the bounds
//!   of the other precisions, derived from their formats.
//! - [`vulkan`]: a clear error where no Vulkan driver is installed.
//! - [`peak_memory`]: the peak memory of our CubeCL paths, streamed and small-classes (the
//!   crate's `testing` feature).

pub mod gates;
pub mod reference;
pub mod vulkan;

pub use burn_fused_head::testing::peak_memory;
