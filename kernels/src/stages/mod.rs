//! The six stages of the head, one naive kernel each: the readable model.
//!
//! The tests gate these kernels against the f64 reference (stock Burn ops on NdArray) and gate
//! the fast path against them on the same backend. The fast path never launches them: editing
//! one changes what the tests compare against, never what `loss.backward()` runs. Where a stage
//! and a fast-path kernel compute the same thing (stage 2, stage 3's mask, stage 5), both call
//! the same helper ([`crate::softmax_ce`], [`crate::activation`], [`crate::reductions::columns`]).
//!
//! 1. [`linear_relu_forward`]: Z = X W^T + b and H = ReLU(Z).
//! 2. [`softmax_cross_entropy`]: per-row loss and dH = (p - onehot) / B.
//! 3. [`relu_backward`]: dZ = dH [Z > 0] g.
//! 4. [`weight_gradient`]: dW = dZ^T X.
//! 5. [`bias_gradient`]: db = column sums of dZ.
//! 6. [`input_gradient`]: dX = dZ W.
//!
//! The batch mean of the per-row losses is a shared reduction
//! ([`crate::reductions::mean::mean_loss`]).

pub mod bias_gradient;
pub mod input_gradient;
pub mod linear_relu_forward;
pub mod relu_backward;
pub mod softmax_cross_entropy;
pub mod weight_gradient;
