//! Stage 1 on TF32 tensor cores, for the opt-in TF32 precision of the large-C path:
//! `Z = X W^T + b`, `H = ReLU(Z)`, with the product of `tf32_matmul` (A = X stored [B, I],
//! B = W^T read in place from W stored [C, I]) and the bias and ReLU applied as each output
//! leaves the accumulators. The bias is added in f32, unrounded. X and W are read as vectors of
//! N (dividing I); `parts` = 4 / N.

use cubecl::{cube, prelude::*};

use crate::tf32_matmul::{TILE, fragment_origin, tf32_gemm_tile, tf32_shared, unstage_fragment};

/// Accumulator fragments per plane along M and N (as in `tf32_matmul`).
const FRAGS_M: usize = 4;
const FRAGS_N: usize = 2;
const V: usize = 4;

#[cube(launch_unchecked)]
pub fn tf32_linear_relu_forward<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<F>,
    z: &mut Tensor<F>,
    h: &mut Tensor<F>,
    #[comptime] parts: usize,
) {
    let batch = x.shape(0);
    let inputs = x.shape(1);
    let classes = w.shape(0);
    let m0 = CUBE_POS_Y as usize * TILE;
    let n0 = CUBE_POS_X as usize * TILE;
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
                        h[m * classes + n] = select(pre <= F::new(0.0), F::new(0.0), pre);
                    }
                    if n + V < classes {
                        let pre = hi[e] + b[n + V];
                        z[m * classes + n + V] = pre;
                        h[m * classes + n + V] = select(pre <= F::new(0.0), F::new(0.0), pre);
                    }
                }
            }
        }
    }
}
