//! CubeCL kernels of `burn-fused-head`: the six stages of a classifier head
//! `Z = X W^T + b`, `H = ReLU(Z)`, `loss = mean_rows(cross_entropy(softmax(H), labels))`,
//! forward and backward, plus the deterministic mean of the per-row losses.
//!
//! Letters, as everywhere in the project: B (batch), I (inputs), C (classes).
//! X is [B, I], W is stored [C, I], b is [C], Z and H are [B, C], labels are [B].
//!
//! Every kernel here assumes contiguous row-major tensors; the host code in `burn-fused-head`
//! makes them so before launching. Every kernel guards its own bounds, so any cube count that
//! covers the work is valid; the fast-path kernels (all but the six stages) are launched
//! without CubeCL's bound checks for that reason. Reductions use a fixed order (a strided loop
//! per unit, then a tree in shared memory), never atomics, so the same inputs give the same
//! bits.
//!
//! This crate holds `#[cube]` code only; launch geometry lives beside the backend impl.

pub mod bias_gradient;
pub mod bias_relu;
pub mod input_gradient;
pub mod linear_relu_forward;
pub mod mean_loss;
pub mod partial_sum;
pub mod relu_backward;
pub mod row_tiles;
pub mod small_classes_backward;
pub mod small_classes_forward;
pub mod small_classes_logits;
pub mod softmax_cross_entropy;
pub mod tf32_linear_relu_forward;
pub mod tf32_matmul;
pub mod tiled_linear_relu_forward;
pub mod tiled_matmul;
pub mod weight_gradient;

mod tree;
