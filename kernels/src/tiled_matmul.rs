//! Tiled matrix product `Out[m, n] = sum_k A[m, k] B[k, n]` in exact f32 (FMA, no tensor
//! cores), for the large-C path: `dW = dZ^T X` and `dX = dZ W` here, `Z = X W^T + b` in
//! `tiled_linear_relu_forward` through [`gemm_tile`].
//!
//! Operands are contiguous; two compile-time flags say which of their dimensions is the
//! contiguous one, so the transposes of the head are read in place:
//! - `a_k_contiguous`: A stored [M, K] (else stored [K, M], A = that^T);
//! - `b_k_contiguous`: B stored [N, K] (B = that^T, as W^T), else stored [K, N].
//!
//! One cube of 256 units computes a TILE x TILE (128 x 128) block of Out. Per step of DEPTH (8)
//! along K, the cube stages the A and B blocks in shared memory (loads ordered along each
//! operand's contiguous dimension, rows padded against bank conflicts), then each unit
//! accumulates an 8 x 8 grid of outputs, rows `ty + 16 i`, columns `tx + 16 j`, with 16 shared
//! loads per 64 FMAs. Out of range elements load as 0 and are never stored. The sum over k runs
//! in order, so the result is deterministic.

use cubecl::{cube, prelude::*};

/// Rows and columns of Out per cube.
pub const TILE: usize = 128;
/// Step along K per shared-memory stage.
pub const DEPTH: usize = 8;
/// Units per cube the kernels assume (16 x 16, each 8 x 8 outputs).
pub const UNITS: u32 = 256;
const MICRO: usize = 8;
const SIDE: usize = 16;
/// Padded row length of the shared blocks.
const PADDED: usize = TILE + 4;

/// Elements of one operand block each unit moves per step.
const PER_UNIT: usize = DEPTH * TILE / UNITS as usize;

/// Where element `l` of this unit's share of a DEPTH x TILE block lies: `(k, t)`, t along M (A)
/// or N (B). Consecutive units walk the operand's stored contiguous dimension.
#[cube]
fn block_position(l: usize, #[comptime] k_contiguous: bool) -> (usize, usize) {
    let e = UNIT_POS as usize + l * UNITS as usize;
    let mut k = e / TILE;
    let mut t = e % TILE;
    if k_contiguous {
        k = e % DEPTH;
        t = e / DEPTH;
    }
    (k, t)
}

/// Reads this unit's share of the block at (`k0`, `t0`) from global memory into `regs`, zero
/// outside `k < k_end`, `t < t_size`. `k_contiguous`: stored [T, K], else stored [K, T].
#[cube]
fn load_block<F: Float>(
    src: &Tensor<F>,
    regs: &mut Array<F>,
    t0: usize,
    t_size: usize,
    k0: usize,
    k_end: usize,
    k_size: usize,
    #[comptime] k_contiguous: bool,
) {
    #[unroll]
    for l in 0..PER_UNIT {
        let (k, t) = block_position(l, k_contiguous);
        let gk = k0 + k;
        let gt = t0 + t;
        let mut v = F::new(0.0);
        if gk < k_end && gt < t_size {
            if k_contiguous {
                v = src[gt * k_size + gk];
            } else {
                v = src[gk * t_size + gt];
            }
        }
        regs[l] = v;
    }
}

/// Writes this unit's share of a block from `regs` to `smem[k * PADDED + t]`.
#[cube]
fn store_block<F: Float>(
    regs: &Array<F>,
    smem: &mut SharedMemory<F>,
    #[comptime] k_contiguous: bool,
) {
    #[unroll]
    for l in 0..PER_UNIT {
        let (k, t) = block_position(l, k_contiguous);
        smem[k * PADDED + t] = regs[l];
    }
}

/// Accumulates this unit's 8 x 8 outputs of the cube's tile (rows `m0 + ty + 16 i`, columns
/// `n0 + tx + 16 j`) into `acc[i * 8 + j]`, over k in `[k_begin, k_end)` (of K = `k_size`).
#[cube]
pub fn gemm_tile<F: Float>(
    a: &Tensor<F>,
    b: &Tensor<F>,
    acc: &mut Array<F>,
    m0: usize,
    n0: usize,
    m_size: usize,
    n_size: usize,
    k_begin: usize,
    k_end: usize,
    k_size: usize,
    #[comptime] a_k_contiguous: bool,
    #[comptime] b_k_contiguous: bool,
) {
    let unit = UNIT_POS as usize;
    let tx = unit % SIDE;
    let ty = unit / SIDE;
    let mut smem_a = SharedMemory::<F>::new(DEPTH * PADDED);
    let mut smem_b = SharedMemory::<F>::new(DEPTH * PADDED);
    #[unroll]
    for e in 0..MICRO * MICRO {
        acc[e] = F::new(0.0);
    }
    let mut a_frag = Array::<F>::new(MICRO);
    let mut b_frag = Array::<F>::new(MICRO);

    // Measured: reading the next step's blocks into registers before this step's FMAs (a
    // register prefetch) was slower on the H200 (223 -> 279 ms at (8192, 4096, 32000)), so each
    // step loads, stores and waits (PERF_NOTES.md, change 4).
    let mut regs_a = Array::<F>::new(PER_UNIT);
    let mut regs_b = Array::<F>::new(PER_UNIT);
    let mut k0 = k_begin;
    while k0 < k_end {
        load_block::<F>(
            a,
            &mut regs_a,
            m0,
            m_size,
            k0,
            k_end,
            k_size,
            a_k_contiguous,
        );
        load_block::<F>(
            b,
            &mut regs_b,
            n0,
            n_size,
            k0,
            k_end,
            k_size,
            b_k_contiguous,
        );
        store_block::<F>(&regs_a, &mut smem_a, a_k_contiguous);
        store_block::<F>(&regs_b, &mut smem_b, b_k_contiguous);
        sync_cube();
        #[unroll]
        for k in 0..DEPTH {
            #[unroll]
            for i in 0..MICRO {
                a_frag[i] = smem_a[k * PADDED + ty + SIDE * i];
                b_frag[i] = smem_b[k * PADDED + tx + SIDE * i];
            }
            #[unroll]
            for i in 0..MICRO {
                #[unroll]
                for j in 0..MICRO {
                    acc[i * MICRO + j] += a_frag[i] * b_frag[j];
                }
            }
        }
        // The next stores may overwrite the blocks only after every unit has read them.
        sync_cube();
        k0 += DEPTH;
    }
}

/// `Out = A B` over one slice of K: Out is [M, N], or [S, M, N] for S slices of `k_per_slice`
/// (split K, when the output has too few tiles to fill the device; the host adds the slices
/// in order with `partial_sum`). Cube (x, y, z) computes the tile at columns `x * TILE`, rows
/// `y * TILE`, of slice z.
#[cube(launch_unchecked)]
pub fn tiled_matmul<F: Float>(
    a: &Tensor<F>,
    b: &Tensor<F>,
    out: &mut Tensor<F>,
    k_per_slice: u32,
    #[comptime] a_k_contiguous: bool,
    #[comptime] b_k_contiguous: bool,
) {
    let rank = out.rank();
    let m_size = out.shape(rank - 2);
    let n_size = out.shape(rank - 1);
    let k_size = if a_k_contiguous {
        a.shape(1)
    } else {
        a.shape(0)
    };
    let slice = CUBE_POS_Z as usize;
    let k_begin = slice * k_per_slice as usize;
    let k_end = select(
        k_begin + (k_per_slice as usize) < k_size,
        k_begin + k_per_slice as usize,
        k_size,
    );
    let m0 = CUBE_POS_Y as usize * TILE;
    let n0 = CUBE_POS_X as usize * TILE;
    let mut acc = Array::<F>::new(MICRO * MICRO);
    gemm_tile::<F>(
        a,
        b,
        &mut acc,
        m0,
        n0,
        m_size,
        n_size,
        k_begin,
        k_end,
        k_size,
        a_k_contiguous,
        b_k_contiguous,
    );
    let base = slice * m_size * n_size;
    let unit = UNIT_POS as usize;
    let (tx, ty) = (unit % SIDE, unit / SIDE);
    #[unroll]
    for i in 0..MICRO {
        let m = m0 + ty + SIDE * i;
        #[unroll]
        for j in 0..MICRO {
            let n = n0 + tx + SIDE * j;
            if m < m_size && n < n_size {
                out[base + m * n_size + n] = acc[i * MICRO + j];
            }
        }
    }
}
