//! Stage 1 for the large-C path: `Z = X W^T + b`, `H = act(Z)`, with the bias and activation applied
//! as each output leaves the registers, or after a product computed elsewhere.
//!
//! - [`forward_exact`]: the exact f32 tiled product of [`crate::large_classes::matmul`]
//!   (A = X stored [B, I], B = W^T read in place from W stored [C, I]); the sum over I runs in
//!   order.
//! - [`forward_tf32`]: the same on TF32 tensor cores ([`crate::large_classes::tf32_matmul`]);
//!   X and W read as vectors of N (dividing I), `parts` = 4 / N. The bias is added in f32,
//!   unrounded.
//! - [`bias_activation`] and [`bias_activation_in_place`]: bias and activation on a product already computed
//!   (Burn's cubek TF32 matmul on the host side).
//!
//! Same outputs and the same per-element activation as stage 1 (ReLU there); only the tiling (and so the FMA
//! contraction) differs. Z (holding the product on entry of `bias_activation`) and H are [B, C]
//! contiguous, b is [C].

use cubecl::{cube, prelude::*};

use crate::activation::activation;
use crate::large_classes::matmul::{gemm_tile, micro_offset, tile_origin};
use crate::large_classes::tf32_matmul::{
    fragment_origin, tf32_gemm_tile, tf32_shared, unstage_fragment,
};

/// Outputs per unit along M and N in `forward_exact` (the 8 x 8 grid of `gemm_tile`), and units
/// per side of its 16 x 16 cube. Invariants of `gemm_tile`'s layout.
const MICRO: usize = 8;
const SIDE: usize = 16;
/// Accumulator fragments per plane along M and N in `forward_tf32`, and the width of its
/// unstaged vectors. Invariants of `tf32_gemm_tile`'s layout (64 x 32 outputs per plane).
const FRAGS_M: usize = 4;
const FRAGS_N: usize = 2;
const V: usize = 4;

#[cube(launch_unchecked)]
pub fn forward_exact<F: Float>(
    x: &Tensor<F>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    z: &mut Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let inputs = x.shape(1);
    let classes = w.shape(0);
    let (m0, n0) = tile_origin();
    let mut acc = Array::<F>::new(MICRO * MICRO);
    gemm_tile::<F>(
        x, w, &mut acc, m0, n0, batch, classes, 0, inputs, inputs, true, true,
    );
    let unit = UNIT_POS as usize;
    let (tx, ty) = (unit % SIDE, unit / SIDE);
    #[unroll]
    for j in 0..MICRO {
        let n = n0 + micro_offset(j, tx);
        if n < classes {
            let bias = b[n];
            #[unroll]
            for i in 0..MICRO {
                let m = m0 + micro_offset(i, ty);
                if m < batch {
                    let pre = acc[i * MICRO + j] + bias;
                    z[m * classes + n] = pre;
                    h[m * classes + n] = activation::<F>(pre, relu);
                }
            }
        }
    }
}

#[cube(launch_unchecked)]
pub fn forward_tf32<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    z: &mut Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] parts: usize,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let inputs = x.shape(1);
    let classes = w.shape(0);
    let (m0, n0) = tile_origin();
    let (mut smem_a, mut smem_b) = tf32_shared::<F>();
    let acc = tf32_gemm_tile::<F, N, N>(
        x,
        w,
        &mut smem_a,
        &mut smem_b,
        m0,
        n0,
        batch,
        classes,
        0,
        inputs,
        inputs,
        true,
        true,
        parts,
        parts,
    );
    #[unroll]
    for mi in 0..FRAGS_M {
        #[unroll]
        for ni in 0..FRAGS_N {
            let (lo, hi) = unstage_fragment::<F>(&mut smem_a, acc.index(mi * FRAGS_N + ni));
            let (row, col) = fragment_origin(mi, ni);
            let m = m0 + row;
            if m < batch {
                #[unroll]
                for e in 0..V {
                    let n = n0 + col + e;
                    if n < classes {
                        let pre = lo[e] + b[n];
                        z[m * classes + n] = pre;
                        h[m * classes + n] = activation::<F>(pre, relu);
                    }
                    if n + V < classes {
                        let pre = hi[e] + b[n + V];
                        z[m * classes + n + V] = pre;
                        h[m * classes + n + V] = activation::<F>(pre, relu);
                    }
                }
            }
        }
    }
}

/// `Z = P + b` in place, and `H = act(Z)`: the training forward, whose backward needs Z.
#[cube(launch_unchecked)]
pub fn bias_activation<F: Float>(
    z: &mut Tensor<F>,
    b: &Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] relu: bool,
) {
    let pos = ABSOLUTE_POS;
    if pos < z.len() {
        let v = z[pos] + b[pos % b.len()];
        z[pos] = v;
        h[pos] = activation::<F>(v, relu);
    }
}

/// `H = act(P + b)` in place of P: the logits alone, which never need Z (no second [B, C]
/// buffer, one write per element instead of two).
#[cube(launch_unchecked)]
pub fn bias_activation_in_place<F: Float>(
    p: &mut Tensor<F>,
    b: &Tensor<F>,
    #[comptime] relu: bool,
) {
    let pos = ABSOLUTE_POS;
    if pos < p.len() {
        let v = p[pos] + b[pos % b.len()];
        p[pos] = activation::<F>(v, relu);
    }
}
