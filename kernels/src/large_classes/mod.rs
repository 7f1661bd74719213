//! The fast path for C > 32: compute-bound, three products of 2 B I C FLOPs each
//! (`Z = X W^T`, `dW = dZ^T X`, `dX = dZ W`) with the row work between them.
//!
//! - [`matmul`]: the exact f32 tiled product (FMA), both transposes read in place.
//! - [`tf32_matmul`]: the same product on TF32 tensor cores (CubeCL `cmma`), for
//!   `HeadPrecision::Tf32` where Burn's cubek kernel does not take the problem.
//! - [`forward`]: stage 1 on either product, with the bias and activation on the way out, and the
//!   bias and activation after a product computed elsewhere.
//! - [`rows`]: the per-row softmax cross-entropy, the masked gradient and the bias gradient.
//! - [`streamed`]: the streamed path's row and column kernels, in place on a chunk of rows.

pub mod forward;
pub mod matmul;
pub mod rows;
pub mod streamed;
pub mod tf32_matmul;
