//! Tiled stage 1 for the large-C path: `Z = X W^T + b`, `H = ReLU(Z)`, with the tiled product
//! of `tiled_matmul` (A = X stored [B, I], B = W^T read in place from W stored [C, I]) and the
//! bias and ReLU applied as each output leaves the registers.
//!
//! Same outputs and the same per-element select as stage 1; only the tiling (and so the FMA
//! contraction) differs, and the sum over I runs in order.

use cubecl::{cube, prelude::*};

use crate::tiled_matmul::{TILE, gemm_tile, micro_offset};

const MICRO: usize = 8;
const SIDE: usize = 16;

#[cube(launch_unchecked)]
pub fn tiled_linear_relu_forward<F: Float>(
    x: &Tensor<F>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    z: &mut Tensor<F>,
    h: &mut Tensor<F>,
) {
    let batch = x.shape(0);
    let inputs = x.shape(1);
    let classes = w.shape(0);
    let m0 = CUBE_POS_Y as usize * TILE;
    let n0 = CUBE_POS_X as usize * TILE;
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
                    h[m * classes + n] = select(pre <= F::new(0.0), F::new(0.0), pre);
                }
            }
        }
    }
}
