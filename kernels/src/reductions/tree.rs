//! Tree reductions over one cube's shared memory, used by the row and column reductions.
//!
//! Invariant: `CUBE_DIM` is a power of two (the host launches 256 units, or 1024 for the
//! streamed row kernel's long rows on CUDA), and every unit of the
//! cube has written its partial value to `smem[UNIT_POS]` before the call.

use cubecl::{cube, prelude::*};

/// Sum of `smem[0..CUBE_DIM]`, in a fixed pairwise order; every unit gets the result.
#[cube]
pub fn tree_sum<F: Float>(smem: &mut SharedMemory<F>) -> F {
    tree_reduce::<F>(smem, false)
}

/// Maximum of `smem[0..CUBE_DIM]`; every unit gets the result.
///
/// `F::max` of a NaN and a number may return the number (CUDA's `fmaxf`), so a NaN row does not
/// come out of the maximum; the caller's sum of exponentials carries the NaN instead.
#[cube]
pub fn tree_max<F: Float>(smem: &mut SharedMemory<F>) -> F {
    tree_reduce::<F>(smem, true)
}

/// The pairwise tree of [`tree_sum`] (`max` false) and [`tree_max`] (`max` true), halving the
/// active units at each level.
#[cube]
fn tree_reduce<F: Float>(smem: &mut SharedMemory<F>, #[comptime] max: bool) -> F {
    sync_cube();
    let mut half = CUBE_DIM / 2;
    while half > 0 {
        if UNIT_POS < half {
            let other = smem[(UNIT_POS + half) as usize];
            if max {
                smem[UNIT_POS as usize] = F::max(smem[UNIT_POS as usize], other);
            } else {
                smem[UNIT_POS as usize] += other;
            }
        }
        // Every unit must see this level's values before the next level reads them.
        sync_cube();
        half /= 2;
    }
    let total = smem[0];
    // Nobody may overwrite smem[0] (a later reduction in the same kernel) before all have read it.
    sync_cube();
    total
}

/// `(m, d)` of the units' pairs `(maxes[k], sums[k])`, each a maximum and a sum of
/// exponentials relative to it (`sums[k] = sum_c exp(h_c - maxes[k])` over a unit's share of a
/// row): `m` the largest of the maxima and `d = sum_k sums[k] exp(maxes[k] - m)`, combined in a
/// fixed pairwise order (online softmax's merge); every unit gets the result. A NaN sum carries
/// into `d`.
#[cube]
pub fn tree_max_sum<F: Float>(maxes: &mut SharedMemory<F>, sums: &mut SharedMemory<F>) -> (F, F) {
    sync_cube();
    let mut half = CUBE_DIM / 2;
    while half > 0 {
        if UNIT_POS < half {
            let (a, b) = (UNIT_POS as usize, (UNIT_POS + half) as usize);
            let (ma, mb) = (maxes[a], maxes[b]);
            let m = F::max(ma, mb);
            sums[a] = sums[a] * F::exp(ma - m) + sums[b] * F::exp(mb - m);
            maxes[a] = m;
        }
        // Every unit must see this level's values before the next level reads them.
        sync_cube();
        half /= 2;
    }
    let total = (maxes[0], sums[0]);
    // Nobody may overwrite either array (a later reduction) before all have read them.
    sync_cube();
    total
}

/// `(max, index)` of `values[0..CUBE_DIM]` with their `indices`: the largest value, and on a
/// tie the smallest index; every unit gets the result. The maximum is exact, so it is the value
/// [`tree_max`] gives (NaN aside: comparisons skip a NaN that is not the first value a unit
/// saw). Each unit has written its candidate to both arrays before the call.
#[cube]
pub fn tree_argmax<F: Float>(
    values: &mut SharedMemory<F>,
    indices: &mut SharedMemory<u32>,
) -> (F, u32) {
    sync_cube();
    let mut half = CUBE_DIM / 2;
    while half > 0 {
        if UNIT_POS < half {
            let (a, b) = (UNIT_POS as usize, (UNIT_POS + half) as usize);
            let (va, vb) = (values[a], values[b]);
            let (ia, ib) = (indices[a], indices[b]);
            let take = vb > va || (vb == va && ib < ia);
            values[a] = select(take, vb, va);
            indices[a] = select(take, ib, ia);
        }
        sync_cube();
        half /= 2;
    }
    let best = (values[0], indices[0]);
    sync_cube();
    best
}

/// Independent accumulators of [`strided_sum`]: that many loads in flight per unit.
const LANES: usize = 8;

/// `sum_k t[start + k * stride]` for `k < count`, with LANES independent accumulators (term k
/// goes to accumulator k % LANES, the tail to the first), combined by a fixed pairwise tree: a
/// fixed order, so the same bits every run, and LANES loads in flight instead of one.
#[cube]
pub fn strided_sum<F: Float>(t: &Tensor<F>, start: usize, stride: usize, count: usize) -> F {
    let mut acc = Array::<F>::new(LANES);
    #[unroll]
    for l in 0..LANES {
        acc[l] = F::new(0.0);
    }
    let mut k = 0;
    while k + LANES <= count {
        #[unroll]
        for l in 0..LANES {
            acc[l] += t[start + (k + l) * stride];
        }
        k += LANES;
    }
    while k < count {
        acc[0] += t[start + k * stride];
        k += 1;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}
