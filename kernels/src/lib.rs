//! CubeCL kernels of `burn-fused-head`: a classifier head `Z = X W^T + b`, `H = act(Z)`,
//! `loss = mean_rows(cross_entropy(softmax(H), targets))`, forward and backward.
//!
//! `act` is ReLU or the identity: each fast-path kernel takes a `#[comptime] relu` flag (see
//! [`activation`]); the stages are ReLU.
//!
//! Letters, as everywhere in the project: B (batch), I (inputs), C (classes).
//! X is [B, I], W is stored [C, I], b is [C], Z and H are [B, C], labels are [B].
//!
//! The folders follow the jobs:
//! - [`stages`]: the six stages, one naive kernel each: the readable model the tests
//!   compare the fast path against. The fast path never launches them.
//! - [`small_classes`]: the fast path for C <= 32 (memory-bound: one pass over X forward, one
//!   backward, C values per row in registers).
//! - [`large_classes`]: the fast path for C > 32 (compute-bound: tiled products, exact f32 or
//!   TF32 tensor cores, and the per-row softmax cross-entropy).
//! - [`reductions`]: fixed-order sums (trees, partial sums, the batch mean, column sums).
//! - [`softmax_ce`] and [`activation`]: the row algebra and the activation, written once and called
//!   by every kernel above.
//!
//! Every kernel assumes contiguous row-major tensors; the host code in `burn-fused-head` makes
//! them so before launching. Every kernel guards its own bounds, so any cube count that covers
//! the work is valid; the fast-path kernels are launched without CubeCL's bound checks for that
//! reason. Reductions use a fixed order (a strided loop per unit, then a tree in shared
//! memory), never atomics, so the same inputs give the same bits.
//!
//! This crate holds `#[cube]` code only; launch geometry lives beside the backend impl.

pub mod activation;
pub mod large_classes;
pub mod reductions;
pub mod small_classes;
pub mod softmax_ce;
pub mod stages;
