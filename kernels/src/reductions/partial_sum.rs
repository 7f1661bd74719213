//! `partial_sum`: `out[n] = sum_p part[p, n]` in a fixed order, for the split-K partials of
//! `large_classes::matmul`; `partial_sum_pair` does two such sums in one launch, for the
//! per-chunk partial dW and db of `small_classes::backward`.
//!
//! part [P, N] and out [N], contiguous. A cube of 256 units covers OUTPUTS (32) consecutive
//! outputs with GROUPS (8) units each: unit (o, g) sums the parts p = g, g + 8, ... with
//! `strided_sum`, then the 8 group sums of each output are added by a fixed pairwise tree. The
//! order depends on P only, so the same inputs give the same bits. P = 0 writes zeros (the
//! gradient of an empty batch).
//!
//! Why 8 units per output: one unit walking all P parts alone kept too few loads in flight
//! (measured on the H200 at (65536, 1024, 10): 187 us for dW and 146 us for db, against
//! 13.2 us for both with this layout).

use cubecl::{cube, prelude::*};

use crate::reductions::tree::strided_sum;

/// Consecutive outputs per cube (the host sizes its launch by it). Invariant: OUTPUTS x GROUPS
/// is the cube's 256 units.
pub const OUTPUTS: usize = 32;
/// Units per output. Invariant: 8, the pairwise tree of step 2 adds exactly 8 group sums.
const GROUPS: usize = 8;

#[cube(launch_unchecked)]
pub fn partial_sum<F: Float>(part: &Tensor<F>, out: &mut Tensor<F>) {
    sum_parts::<F>(part, out, CUBE_POS);
}

/// Two sums in one launch: cubes `0..first_cubes` sum `part_a` into `out_a` as `partial_sum`
/// does, the others `part_b` into `out_b` (the small-C backward's dW and db partials).
#[cube(launch_unchecked)]
pub fn partial_sum_pair<F: Float>(
    part_a: &Tensor<F>,
    out_a: &mut Tensor<F>,
    part_b: &Tensor<F>,
    out_b: &mut Tensor<F>,
    first_cubes: u32,
) {
    let cube = CUBE_POS;
    if cube < first_cubes as usize {
        sum_parts::<F>(part_a, out_a, cube);
    } else {
        sum_parts::<F>(part_b, out_b, cube - first_cubes as usize);
    }
}

/// The outputs `cube * OUTPUTS ..` of `out`. Every unit of the cube must call it (it has a
/// barrier).
#[cube]
fn sum_parts<F: Float>(part: &Tensor<F>, out: &mut Tensor<F>, cube: usize) {
    let width = out.len();
    let parts = part.len() / width;
    let unit = UNIT_POS as usize;
    let n = cube * OUTPUTS + unit % OUTPUTS;
    let group = unit / OUTPUTS;
    let mut smem = SharedMemory::<F>::new(OUTPUTS * GROUPS);

    // 1. This unit's share: parts group, group + GROUPS, ...
    let mut v = F::new(0.0);
    if n < width && group < parts {
        let count = (parts - group).div_ceil(GROUPS);
        v = strided_sum::<F>(part, group * width + n, GROUPS * width, count);
    }
    smem[unit] = v;
    sync_cube();

    // 2. The 8 group sums of each output, in a fixed pairwise order.
    if group == 0 && n < width {
        out[n] = ((smem[unit] + smem[OUTPUTS + unit])
            + (smem[2 * OUTPUTS + unit] + smem[3 * OUTPUTS + unit]))
            + ((smem[4 * OUTPUTS + unit] + smem[5 * OUTPUTS + unit])
                + (smem[6 * OUTPUTS + unit] + smem[7 * OUTPUTS + unit]));
    }
}
