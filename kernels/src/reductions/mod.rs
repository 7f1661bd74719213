//! Fixed-order reductions: the same inputs give the same bits, with no atomics.
//!
//! - [`tree`]: sums and maxima over one cube's shared memory, and a strided sum with several
//!   loads in flight.
//! - [`partial_sum`]: `out = sum_p part[p]`, the split-K slices and the small-C backward's
//!   per-chunk dW and db.
//! - [`mean`]: the batch mean of the losses (per row, or per cube of the small-C forwards).
//! - [`columns`]: one column sum per cube (the bias gradient).
//! - [`pairwise`]: the sum of a vector in the stock-op sums' pairwise order, in one launch
//!   (the cross-entropy options' reductions).

pub mod columns;
pub mod mean;
pub mod pairwise;
pub mod partial_sum;
pub mod tree;
