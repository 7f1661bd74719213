//! Tiled matrix product `Out[m, n] = sum_k A[m, k] B[k, n]` in exact f32 (FMA, no tensor
//! cores), for the large-C path: `dW = dZ^T X` and `dX = dZ W` here, `Z = X W^T + b` in
//! `forward::forward_exact` through [`gemm_tile`].
//!
//! Operands are contiguous; two compile-time flags say which of their dimensions is the
//! contiguous one, so the transposes of the head are read in place:
//! - `a_k_contiguous`: A stored [M, K] (else stored [K, M], A = that^T);
//! - `b_k_contiguous`: B stored [N, K] (B = that^T, as W^T), else stored [K, N].
//!
//! One cube of 256 units computes a TILE x TILE (128 x 128) block of Out. Per step of DEPTH (8)
//! along K, the cube stages the A and B blocks in shared memory as vectors of 4 along M (or N)
//! (loads ordered along each operand's contiguous dimension, rows padded against bank
//! conflicts), then each unit accumulates an 8 x 8 grid of outputs, rows `ty * 4 + i` and
//! `64 + ty * 4 + i`, columns likewise with `tx` (i < 4), with 4 vector shared loads per 64 FMAs.
//! Two shared buffers: each step's global loads are in flight while the previous step's FMAs
//! run, with one barrier per step.
//! Out of range elements load as 0 and are never stored. The sum over k runs in order, so the
//! result is deterministic. Every global access is guarded, so the host launches these kernels
//! without bound checks.

use cubecl::{cube, prelude::*};

/// Rows and columns of Out per cube.
pub const TILE: usize = 128;
/// Step along K per shared-memory stage.
pub const DEPTH: usize = 8;
/// Units per cube the kernels assume (16 x 16, each 8 x 8 outputs).
pub const UNITS: u32 = 256;
const MICRO: usize = 8;
const SIDE: usize = 16;
/// Elements per shared-memory vector.
const V: usize = 4;
/// Vectors per row of a shared block, plus one of padding (no bank conflicts when the units
/// store along K).
const PADDED: usize = TILE / V + 1;

/// Where this unit's vector of a DEPTH x TILE block lies: `(k, vector index along t)`, t along
/// M (A) or N (B); DEPTH x TILE / V = UNITS, one vector per unit. Consecutive units walk the
/// operand's stored contiguous dimension.
#[cube]
fn block_position(#[comptime] k_contiguous: bool) -> (usize, usize) {
    let unit = UNIT_POS as usize;
    let mut k = unit / (TILE / V);
    let mut tv = unit % (TILE / V);
    if k_contiguous {
        k = unit % DEPTH;
        tv = unit / DEPTH;
    }
    (k, tv)
}

/// This unit's vector of the block at (`k0`, `t0`), from global memory: `k`, `tv` are its
/// [`block_position`]; zero outside `k < k_end`, `t < t_size`. `k_contiguous`: stored [T, K],
/// else stored [K, T].
#[cube]
fn load_block<F: Float>(
    src: &Tensor<F>,
    k: usize,
    tv: usize,
    t0: usize,
    t_size: usize,
    k0: usize,
    k_end: usize,
    k_size: usize,
    #[comptime] k_contiguous: bool,
) -> Vector<F, Const<4>> {
    let gk = k0 + k;
    let mut v = Vector::<F, Const<4>>::empty().fill(F::new(0.0));
    #[unroll]
    for j in 0..V {
        let gt = t0 + tv * V + j;
        if gk < k_end && gt < t_size {
            if k_contiguous {
                v[j] = src[gt * k_size + gk];
            } else {
                v[j] = src[gk * t_size + gt];
            }
        }
    }
    v
}

/// 64 FMAs of step `k` of the shared blocks at `base` (in vectors): rows `ty * 4 + i` and
/// `64 + ty * 4 + i`, columns `tx * 4 + j` and `64 + tx * 4 + j`, four vector reads.
#[cube]
fn step_fma<F: Float>(
    smem_a: &SharedMemory<Vector<F, Const<4>>>,
    smem_b: &SharedMemory<Vector<F, Const<4>>>,
    acc: &mut Array<F>,
    row: usize,
    tx: usize,
    ty: usize,
) {
    let a_lo = smem_a[row + ty];
    let a_hi = smem_a[row + SIDE + ty];
    let b_lo = smem_b[row + tx];
    let b_hi = smem_b[row + SIDE + tx];
    #[unroll]
    for i in 0..V {
        #[unroll]
        for j in 0..V {
            acc[i * MICRO + j] += a_lo[i] * b_lo[j];
            acc[i * MICRO + V + j] += a_lo[i] * b_hi[j];
            acc[(V + i) * MICRO + j] += a_hi[i] * b_lo[j];
            acc[(V + i) * MICRO + V + j] += a_hi[i] * b_hi[j];
        }
    }
}

/// Row `i` (of 8) of this unit's outputs within the tile: `(i / 4) * 64 + ty * 4 + i % 4`
/// (columns the same with `tx`).
#[cube]
pub fn micro_offset(i: usize, t: usize) -> usize {
    (i / V) * (TILE / 2) + t * V + i % V
}

/// Accumulates this unit's 8 x 8 outputs of the cube's tile (rows `m0 + micro_offset(i, ty)`,
/// columns `n0 + micro_offset(j, tx)`) into `acc[i * 8 + j]`, over k in `[k_begin, k_end)` (of
/// K = `k_size`).
///
/// Two shared buffers: the next step's global loads are issued before this step's FMAs and
/// stored into the other buffer after them, one barrier per step. (Measured on the H200 at
/// (8192, 4096, 32000): 173 ms a step, against 189 ms for load, store, barrier, FMAs, barrier
/// with one buffer.)
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
    #[unroll]
    for e in 0..MICRO * MICRO {
        acc[e] = F::new(0.0);
    }
    let (ka, tva) = block_position(a_k_contiguous);
    let (kb, tvb) = block_position(b_k_contiguous);
    let block = DEPTH * PADDED;
    let mut smem_a = SharedMemory::<Vector<F, Const<4>>>::new(2 * DEPTH * PADDED);
    let mut smem_b = SharedMemory::<Vector<F, Const<4>>>::new(2 * DEPTH * PADDED);
    let mut va = load_block::<F>(
        a,
        ka,
        tva,
        m0,
        m_size,
        k_begin,
        k_end,
        k_size,
        a_k_contiguous,
    );
    let mut vb = load_block::<F>(
        b,
        kb,
        tvb,
        n0,
        n_size,
        k_begin,
        k_end,
        k_size,
        b_k_contiguous,
    );
    smem_a[ka * PADDED + tva] = va;
    smem_b[kb * PADDED + tvb] = vb;
    sync_cube();
    let mut cur = 0;
    let mut k0 = k_begin;
    // Step s reads buffer s % 2 and fills the other, which every unit finished reading
    // in step s - 1 (the barrier that ended it); the barrier ending step s publishes it.
    while k0 < k_end {
        let next = k0 + DEPTH;
        let more = next < k_end;
        if more {
            va = load_block::<F>(a, ka, tva, m0, m_size, next, k_end, k_size, a_k_contiguous);
            vb = load_block::<F>(b, kb, tvb, n0, n_size, next, k_end, k_size, b_k_contiguous);
        }
        #[unroll]
        for k in 0..DEPTH {
            step_fma::<F>(&smem_a, &smem_b, acc, cur + k * PADDED, tx, ty);
        }
        if more {
            let other = block - cur;
            smem_a[other + ka * PADDED + tva] = va;
            smem_b[other + kb * PADDED + tvb] = vb;
        }
        sync_cube();
        cur = block - cur;
        k0 = next;
    }
}

/// K of `Out = A B` (A is `[M, K]`, or `[K, M]` where its K is not contiguous) and this cube's
/// slice of it (`CUBE_POS_Z`) in slices of `k_per_slice`: `(k_size, slice, k_begin, k_end)`.
#[cube]
pub fn slice_of_k<E: CubePrimitive>(
    a: &Tensor<E>,
    k_per_slice: u32,
    #[comptime] a_k_contiguous: bool,
) -> (usize, usize, usize, usize) {
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
    (k_size, slice, k_begin, k_end)
}

/// The first row and column `(m0, n0)` of this cube's `TILE x TILE` tile of the output: cube
/// (x, y) computes rows `y * TILE`, columns `x * TILE`.
#[cube]
pub fn tile_origin() -> (usize, usize) {
    (CUBE_POS_Y as usize * TILE, CUBE_POS_X as usize * TILE)
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
    let (k_size, slice, k_begin, k_end) = slice_of_k(a, k_per_slice, a_k_contiguous);
    let (m0, n0) = tile_origin();
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
        let m = m0 + micro_offset(i, ty);
        #[unroll]
        for j in 0..MICRO {
            let n = n0 + micro_offset(j, tx);
            if m < m_size && n < n_size {
                out[base + m * n_size + n] = acc[i * MICRO + j];
            }
        }
    }
}
