//! Tiled matrix product `Out[m, n] = sum_k A[m, k] B[k, n]` on TF32 tensor cores (CubeCL
//! `cmma`, 16 x 16 x 8 fragments), for the opt-in TF32 precision of the large-C path:
//! `dW = dZ^T X` and `dX = dZ W` here, `Z = X W^T + b` in `forward::forward_tf32` through
//! [`tf32_gemm_tile`].
//!
//! What it computes: every operand element is rounded to TF32 (10-bit mantissa, round to
//! nearest, ties to even, by [`round_tf32`]) when it is staged in shared memory;
//! the tensor cores multiply the rounded values exactly and accumulate in f32. So the result is
//! the f32 product of the rounded operands, up to the order of the f32 sums.
//!
//! Operands are contiguous, with the same two layout flags as `tiled_matmul`:
//! - `a_k_contiguous`: A stored [M, K] (else stored [K, M], A = that^T);
//! - `b_k_contiguous`: B stored [N, K] (B = that^T, as W^T), else stored [K, N].
//!
//! A and B are read as vectors of `NA` and `NB` elements along their contiguous dimension (4,
//! 2 or 1, dividing it; the kernels also take `4 / NA` and `4 / NB` as compile-time values). Each block is staged in shared memory in its global orientation (the
//! fragments are loaded row- or column-major to match), so every global load is a vector along
//! the contiguous dimension.
//!
//! One cube of 256 units (8 planes of 32) computes a TILE x TILE (128 x 128) block of Out; plane
//! `p` owns rows `(p / 4) * 64 ..+ 64` and columns `(p % 4) * 32 ..+ 32`: 4 x 2 accumulator
//! fragments. Per step of DEPTH (16) along K, two shared buffers as in `tiled_matmul`: the next
//! step's global loads are in flight during this step's matrix products, one barrier per step.
//! Out of range elements load as 0 and are never stored, so every global access is guarded and
//! the host launches these kernels without bound checks. Needs planes of 32 units and the TF32
//! `cmma` configuration m16 n16 k8 (CUDA, compute capability 8.0 and above); the host checks.

use cubecl::{cmma, cube, prelude::*};

use crate::large_classes::matmul::{slice_of_k, tile_origin};

/// Rows and columns of Out per cube.
pub const TILE: usize = crate::large_classes::matmul::TILE;
/// Step along K per shared-memory stage.
pub const DEPTH: usize = 16;
/// Units per cube the kernels assume (8 planes of 32).
pub const UNITS: u32 = 256;
/// Units per plane the kernels assume.
pub const PLANE: u32 = 32;
/// Rows (M) and columns (N) of one fragment.
pub const FRAG: usize = 16;
/// Depth (K) of one fragment product.
pub const FRAG_K: usize = 8;

/// Elements per shared-memory vector.
const V: usize = 4;
/// Planes along N (and 2 along M).
const PLANES_N: usize = 4;
/// Accumulator fragments per plane along M and N: 64 x 32 outputs.
const FRAGS_M: usize = 4;
const FRAGS_N: usize = 2;
/// Row stride (elements) of a block staged as [TILE][DEPTH]: padded so that a fragment load
/// touches 32 distinct banks.
const K_STRIDE: usize = DEPTH + 4;
/// Row stride of a block staged as [DEPTH][TILE], padded likewise.
const T_STRIDE: usize = TILE + 8;
/// Vectors per shared buffer: the larger of the two layouts (640 >= 544), a multiple of 8 so
/// that every fragment starts 32-byte aligned in either buffer.
const BLOCK_VECTORS: usize = TILE * K_STRIDE / V;
/// Byte alignment of the shared buffers (fragment loads need 32).
const ALIGN: usize = 128;

/// Where vector `v` of a block lies in its shared buffer (in vectors).
#[cube]
fn stage_index(v: usize, #[comptime] k_contiguous: bool) -> usize {
    if k_contiguous {
        (v / (DEPTH / V)) * (K_STRIDE / V) + v % (DEPTH / V)
    } else {
        (v / (TILE / V)) * (T_STRIDE / V) + v % (TILE / V)
    }
}

/// `v` (f32) rounded to TF32: the 13 low mantissa bits dropped, to nearest with ties to even,
/// as the tensor cores see operands on Burn's TMA matmul path (CUDA's `__float_to_tf32` rounds
/// ties away instead, which a probe on the H200 showed differs from cubek's on ties). A finite value that rounds past the largest
/// finite f32 becomes an infinity; NaN and the infinities pass unchanged.
#[cube]
pub fn round_tf32<F: Float>(v: F) -> F {
    let bits = u32::reinterpret(v);
    let rounded = (bits + 0xfffu32 + ((bits >> 13u32) & 1u32)) & 0xffff_e000u32;
    let finite = (bits & 0x7f80_0000u32) != 0x7f80_0000u32;
    F::reinterpret(select(finite, rounded, bits))
}

/// Elements `[col, col + 4)` of row `row` of a stored matrix with row stride `stride`, rounded
/// to TF32; zero where `row >= rows` or a column is `>= col_end`. `col` is a multiple of 4 and
/// `col_end` of N, so a vector of N is either wholly in range or wholly out. `parts` = 4 / N
/// (a compile-time loop bound, which `N::value()` in an expression is not).
#[cube]
fn read_vector<F: Float, N: Size>(
    src: &Tensor<Vector<F, N>>,
    row: usize,
    col: usize,
    rows: usize,
    col_end: usize,
    stride: usize,
    #[comptime] parts: usize,
) -> Vector<F, Const<4>> {
    let mut out = Vector::<F, Const<4>>::empty().fill(F::new(0.0));
    if row < rows {
        #[unroll]
        for p in 0..parts {
            let c = col + p * N::value();
            if c < col_end {
                let got = src[(row * stride + c) / N::value()];
                #[unroll]
                for e in 0..N::value() {
                    out[p * N::value() + e] = round_tf32::<F>(got[e]);
                }
            }
        }
    }
    out
}

/// Vector `v` (of TILE x DEPTH / 4) of the block at (`t0`, `k0`): `t` along M (A) or N (B),
/// bounded by `t_size`, `k` bounded by `k_end`, K = `k_size`. Consecutive `v` walk the stored
/// contiguous dimension.
#[cube]
fn load_block_vector<F: Float, N: Size>(
    src: &Tensor<Vector<F, N>>,
    v: usize,
    t0: usize,
    t_size: usize,
    k0: usize,
    k_end: usize,
    k_size: usize,
    #[comptime] k_contiguous: bool,
    #[comptime] parts: usize,
) -> Vector<F, Const<4>> {
    if k_contiguous {
        let row = t0 + v / (DEPTH / V);
        let col = k0 + (v % (DEPTH / V)) * V;
        read_vector::<F, N>(src, row, col, t_size, k_end, k_size, parts)
    } else {
        let row = k0 + v / (TILE / V);
        let col = t0 + (v % (TILE / V)) * V;
        read_vector::<F, N>(src, row, col, k_end, t_size, t_size, parts)
    }
}

/// A TF32 fragment of the staged block starting at vector `first`: `lines` strided lines of
/// `stride` elements (16 rows of A, or 8 of B, ...), loaded with `layout`.
#[cube]
fn load_fragment<F: Float>(
    smem: &SharedMemory<Vector<F, Const<4>>>,
    first: usize,
    #[comptime] lines: usize,
    #[comptime] stride: usize,
    #[comptime] ident: cmma::MatrixIdent,
    #[comptime] layout: cmma::MatrixLayout,
) -> cmma::Matrix<tf32> {
    let frag = unsafe { cmma::Matrix::<tf32>::uninitialized(ident, FRAG, FRAG, FRAG_K, layout) };
    cmma::load(
        &frag,
        &smem.slice(first, first + lines * stride / V),
        stride as u32,
    );
    frag
}

/// Sub-step `s` (of DEPTH / 8) of the staged blocks at `cur` (in vectors): this plane's 4 x 2
/// fragment products.
#[cube]
fn step_mma<F: Float>(
    smem_a: &SharedMemory<Vector<F, Const<4>>>,
    smem_b: &SharedMemory<Vector<F, Const<4>>>,
    acc: &Sequence<cmma::Matrix<F>>,
    cur: usize,
    s: usize,
    wm: usize,
    wn: usize,
    #[comptime] a_k_contiguous: bool,
    #[comptime] b_k_contiguous: bool,
) {
    let mut b_frags = Sequence::<cmma::Matrix<tf32>>::new();
    #[unroll]
    for ni in 0..FRAGS_N {
        let col = wn * FRAGS_N * FRAG + ni * FRAG;
        // B staged [N][DEPTH] is B column-major; staged [DEPTH][N], row-major.
        if b_k_contiguous {
            b_frags.push(load_fragment::<F>(
                smem_b,
                cur + (col * K_STRIDE + s * FRAG_K) / V,
                FRAG,
                K_STRIDE,
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::ColMajor,
            ));
        } else {
            b_frags.push(load_fragment::<F>(
                smem_b,
                cur + (s * FRAG_K * T_STRIDE + col) / V,
                FRAG_K,
                T_STRIDE,
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::RowMajor,
            ));
        }
    }
    #[unroll]
    for mi in 0..FRAGS_M {
        let row = wm * FRAGS_M * FRAG + mi * FRAG;
        // A staged [M][DEPTH] is A row-major; staged [DEPTH][M], column-major.
        let a_frag = if a_k_contiguous {
            load_fragment::<F>(
                smem_a,
                cur + (row * K_STRIDE + s * FRAG_K) / V,
                FRAG,
                K_STRIDE,
                cmma::MatrixIdent::A,
                cmma::MatrixLayout::RowMajor,
            )
        } else {
            load_fragment::<F>(
                smem_a,
                cur + (s * FRAG_K * T_STRIDE + row) / V,
                FRAG_K,
                T_STRIDE,
                cmma::MatrixIdent::A,
                cmma::MatrixLayout::ColMajor,
            )
        };
        #[unroll]
        for ni in 0..FRAGS_N {
            let c = acc.index(mi * FRAGS_N + ni);
            cmma::execute::<tf32, tf32, F, F>(&a_frag, b_frags.index(ni), c, c);
        }
    }
}

/// A shared-memory staging area of 4-vectors.
pub type Staged<F> = SharedMemory<Vector<F, Const<4>>>;

/// The two shared buffers of A and B for [`tf32_gemm_tile`] (the kernels reuse A's to stage
/// the accumulators on the way out).
#[cube]
pub fn tf32_shared<F: Float>() -> (Staged<F>, Staged<F>) {
    (
        SharedMemory::<Vector<F, Const<4>>>::new_aligned(2 * BLOCK_VECTORS, ALIGN),
        SharedMemory::<Vector<F, Const<4>>>::new_aligned(2 * BLOCK_VECTORS, ALIGN),
    )
}

/// This plane's 4 x 2 accumulator fragments of the cube's tile (rows `m0 + (p / 4) * 64 + mi *
/// 16`, columns `n0 + (p % 4) * 32 + ni * 16`, fragment `mi * 2 + ni`), over k in
/// `[k_begin, k_end)` of K = `k_size`. Ends after a barrier, so the caller may reuse the
/// shared buffers.
#[cube]
pub fn tf32_gemm_tile<F: Float, NA: Size, NB: Size>(
    a: &Tensor<Vector<F, NA>>,
    b: &Tensor<Vector<F, NB>>,
    smem_a: &mut SharedMemory<Vector<F, Const<4>>>,
    smem_b: &mut SharedMemory<Vector<F, Const<4>>>,
    m0: usize,
    n0: usize,
    m_size: usize,
    n_size: usize,
    k_begin: usize,
    k_end: usize,
    k_size: usize,
    #[comptime] a_k_contiguous: bool,
    #[comptime] b_k_contiguous: bool,
    #[comptime] a_parts: usize,
    #[comptime] b_parts: usize,
) -> Sequence<cmma::Matrix<F>> {
    let unit = UNIT_POS as usize;
    let plane = unit / PLANE as usize;
    let (wm, wn) = (plane / PLANES_N, plane % PLANES_N);
    let mut acc = Sequence::<cmma::Matrix<F>>::new();
    #[unroll]
    for _ in 0..FRAGS_M * FRAGS_N {
        acc.push(cmma::Matrix::<F>::from_value(
            cmma::MatrixIdent::Accumulator,
            FRAG,
            FRAG,
            FRAG_K,
            cmma::MatrixLayout::Undefined,
            F::new(0.0),
        ));
    }
    // Each unit moves vectors `unit` and `unit + 256` of each block (TILE x DEPTH / 4 = 512).
    let (v0, v1) = (unit, unit + UNITS as usize);
    let mut a0 = load_block_vector::<F, NA>(
        a,
        v0,
        m0,
        m_size,
        k_begin,
        k_end,
        k_size,
        a_k_contiguous,
        a_parts,
    );
    let mut a1 = load_block_vector::<F, NA>(
        a,
        v1,
        m0,
        m_size,
        k_begin,
        k_end,
        k_size,
        a_k_contiguous,
        a_parts,
    );
    let mut b0 = load_block_vector::<F, NB>(
        b,
        v0,
        n0,
        n_size,
        k_begin,
        k_end,
        k_size,
        b_k_contiguous,
        b_parts,
    );
    let mut b1 = load_block_vector::<F, NB>(
        b,
        v1,
        n0,
        n_size,
        k_begin,
        k_end,
        k_size,
        b_k_contiguous,
        b_parts,
    );
    smem_a[stage_index(v0, a_k_contiguous)] = a0;
    smem_a[stage_index(v1, a_k_contiguous)] = a1;
    smem_b[stage_index(v0, b_k_contiguous)] = b0;
    smem_b[stage_index(v1, b_k_contiguous)] = b1;
    sync_cube();
    let mut cur = 0;
    let mut k0 = k_begin;
    // Step s reads buffer s % 2 and fills the other, which every unit finished reading in step
    // s - 1 (the barrier that ended it); the barrier ending step s publishes it.
    while k0 < k_end {
        let next = k0 + DEPTH;
        let more = next < k_end;
        if more {
            a0 = load_block_vector::<F, NA>(
                a,
                v0,
                m0,
                m_size,
                next,
                k_end,
                k_size,
                a_k_contiguous,
                a_parts,
            );
            a1 = load_block_vector::<F, NA>(
                a,
                v1,
                m0,
                m_size,
                next,
                k_end,
                k_size,
                a_k_contiguous,
                a_parts,
            );
            b0 = load_block_vector::<F, NB>(
                b,
                v0,
                n0,
                n_size,
                next,
                k_end,
                k_size,
                b_k_contiguous,
                b_parts,
            );
            b1 = load_block_vector::<F, NB>(
                b,
                v1,
                n0,
                n_size,
                next,
                k_end,
                k_size,
                b_k_contiguous,
                b_parts,
            );
        }
        #[unroll]
        for s in 0..DEPTH / FRAG_K {
            step_mma::<F>(
                smem_a,
                smem_b,
                &acc,
                cur,
                s,
                wm,
                wn,
                a_k_contiguous,
                b_k_contiguous,
            );
        }
        if more {
            let other = BLOCK_VECTORS - cur;
            // Positions recomputed (cheap integer work) rather than held in registers.
            smem_a[other + stage_index(v0, a_k_contiguous)] = a0;
            smem_a[other + stage_index(v1, a_k_contiguous)] = a1;
            smem_b[other + stage_index(v0, b_k_contiguous)] = b0;
            smem_b[other + stage_index(v1, b_k_contiguous)] = b1;
        }
        sync_cube();
        cur = BLOCK_VECTORS - cur;
        k0 = next;
    }
    acc
}

/// Stages accumulator fragment `frag` of this plane in its 16 x 16 corner of `smem` (after
/// [`tf32_gemm_tile`]'s final barrier) and returns this unit's 8 of its values: row
/// `lane / 2`, columns `(lane % 2) * 8 ..+ 8`, as two vectors. Every lane of the plane must
/// call it, in the same order.
#[cube]
pub fn unstage_fragment<F: Float>(
    smem: &mut SharedMemory<Vector<F, Const<4>>>,
    frag: &cmma::Matrix<F>,
) -> (Vector<F, Const<4>>, Vector<F, Const<4>>) {
    let unit = UNIT_POS as usize;
    let plane = unit / PLANE as usize;
    let lane = unit % PLANE as usize;
    let base = plane * FRAG * FRAG / V;
    let mut corner = smem.slice_mut(base, base + FRAG * FRAG / V);
    cmma::store(&mut corner, frag, FRAG as u32, cmma::MatrixLayout::RowMajor);
    sync_plane();
    let first = base + (lane / 2) * (FRAG / V) + (lane % 2) * 2;
    let values = (smem[first], smem[first + 1]);
    sync_plane();
    values
}

/// Row of fragment `mi` and column of fragment `ni` of this plane, within the cube's tile, for
/// this unit's values from [`unstage_fragment`] (the column of the first of the 8).
#[cube]
pub fn fragment_origin(mi: usize, ni: usize) -> (usize, usize) {
    let unit = UNIT_POS as usize;
    let plane = unit / PLANE as usize;
    let lane = unit % PLANE as usize;
    let row = (plane / PLANES_N) * FRAGS_M * FRAG + mi * FRAG + lane / 2;
    let col = (plane % PLANES_N) * FRAGS_N * FRAG + ni * FRAG + (lane % 2) * 8;
    (row, col)
}

/// `Out = A B` over one slice of K, on TF32 tensor cores: Out is [M, N], or [S, M, N] for S
/// slices of `k_per_slice` (a multiple of DEPTH; the host adds the slices in order). Cube
/// (x, y, z) computes the tile at columns `x * TILE`, rows `y * TILE`, of slice z.
#[cube(launch_unchecked)]
pub fn tf32_matmul<F: Float, NA: Size, NB: Size>(
    a: &Tensor<Vector<F, NA>>,
    b: &Tensor<Vector<F, NB>>,
    out: &mut Tensor<F>,
    k_per_slice: u32,
    #[comptime] a_k_contiguous: bool,
    #[comptime] b_k_contiguous: bool,
    #[comptime] a_parts: usize,
    #[comptime] b_parts: usize,
) {
    let rank = out.rank();
    let m_size = out.shape(rank - 2);
    let n_size = out.shape(rank - 1);
    let (k_size, slice, k_begin, k_end) = slice_of_k(a, k_per_slice, a_k_contiguous);
    let (m0, n0) = tile_origin();
    let (mut smem_a, mut smem_b) = tf32_shared::<F>();
    let acc = tf32_gemm_tile::<F, NA, NB>(
        a,
        b,
        &mut smem_a,
        &mut smem_b,
        m0,
        n0,
        m_size,
        n_size,
        k_begin,
        k_end,
        k_size,
        a_k_contiguous,
        b_k_contiguous,
        a_parts,
        b_parts,
    );
    let base = slice * m_size * n_size;
    #[unroll]
    for mi in 0..FRAGS_M {
        #[unroll]
        for ni in 0..FRAGS_N {
            let (lo, hi) = unstage_fragment::<F>(&mut smem_a, acc.index(mi * FRAGS_N + ni));
            let (row, col) = fragment_origin(mi, ni);
            let m = m0 + row;
            if m < m_size {
                #[unroll]
                for e in 0..V {
                    let n = n0 + col + e;
                    if n < n_size {
                        out[base + m * n_size + n] = lo[e];
                    }
                    if n + V < n_size {
                        out[base + m * n_size + n + V] = hi[e];
                    }
                }
            }
        }
    }
}
