//! The fast path for C <= 32: memory-bound, so every kernel reads each row of X once and keeps
//! the C values of a row in registers (C is a compile-time value of each kernel).
//!
//! - [`forward`]: stages 1 and 2 and the per-cube loss sums, in two layouts (planes for small
//!   and medium B, one unit per row for large B).
//! - [`logits`]: H alone, in the same two layouts and the same order (for prediction).
//! - [`backward`]: stages 3 to 6 in one kernel, with per-chunk partial sums of dW and db.
//! - [`dots`]: the dot products and per-row logits the forward and logits kernels share.

pub mod backward;
pub mod dots;
pub mod forward;
pub mod logits;
