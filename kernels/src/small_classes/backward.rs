//! Fused backward for a small number of classes: stages 3, 4, 5 and 6 in one kernel, reading
//! each row of X once.
//!
//! X [B, I] and dX (of type `E`: f32, or bf16 and f16; X kept in its type in registers and
//! widened to `F` as each row is used, dX rounded as it is written), W [C, I], Z and dH [B, C], g [1] (the upstream gradient) of
//! `F`; writes dX [B, I] (when
//! `write_dx`) and, per chunk of rows, partial sums of dW [P, C, I] and db [P, C], which
//! `partial_sum_pair` adds in chunk order afterwards (deterministic, no atomics; with one chunk
//! they are dW and db). All contiguous; X, W, dX and dW are read and written as vectors of N
//! elements (N divides I).
//!
//! Layout: cube (t, p) owns a tile of vectors of columns and the rows of chunk p. Unit u of the
//! cube owns the vector `t * U + u` (U units), keeps its C vectors of W in registers and
//! accumulates its C vectors of dW partial sums over the chunk's rows; no unit ever sums
//! across units. dZ = dH act'(Z) g is computed once per row and shared through shared memory,
//! `stage_rows` rows at a time. Each unit loads X `group` rows at a time, the next group's
//! loads issued before the current group's sums (loads in flight are what a memory-bound
//! kernel lives on).
//!
//! Term by term this is stage 3 (the same `relu_grad`), stage 6 (the same order over c) and stages
//! 4 and 5 with the batch sum split into chunks. Every access is guarded, so the host launches
//! it without bound checks.

use cubecl::{cube, prelude::*};

use crate::activation::activation_grad;

/// This unit's vectors of X of rows `r0 + first ..` (`group` of them; zeros past `rows_here`
/// rows or for a unit past I's vectors), in X's own type.
#[cube]
fn load_rows<E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    xs: &mut Array<Vector<E, N>>,
    r0: usize,
    first: usize,
    rows_here: usize,
    col: usize,
    live: bool,
    #[comptime] group: usize,
) {
    let vectors = x.shape(1) / N::value();
    #[unroll]
    for u in 0..group {
        let mut v = Vector::<E, N>::empty().fill(E::new(0.0));
        if first + u < rows_here && live {
            v = x[(r0 + first + u) * vectors + col];
        }
        xs[u] = v;
    }
}

#[cube(launch_unchecked)]
pub fn backward<F: Float, E: Float, N: Size>(
    x: &Tensor<Vector<E, N>>,
    w: &Tensor<Vector<F, N>>,
    z: &Tensor<F>,
    dh: &Tensor<F>,
    g: &Tensor<F>,
    dx: &mut Tensor<Vector<E, N>>,
    dw_part: &mut Tensor<Vector<F, N>>,
    db_part: &mut Tensor<F>,
    rows_per_chunk: u32,
    #[comptime] classes: usize,
    #[comptime] stage_rows: usize,
    #[comptime] group: usize,
    #[comptime] write_dx: bool,
    #[comptime] relu: bool,
) {
    let batch = x.shape(0);
    let vectors = x.shape(1) / N::value();
    let unit = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let tile = CUBE_POS_X as usize;
    let chunk = CUBE_POS_Y as usize;
    let row_start = chunk * rows_per_chunk as usize;
    let row_end = select(
        row_start + (rows_per_chunk as usize) < batch,
        row_start + rows_per_chunk as usize,
        batch,
    );
    let col = tile * units + unit;
    let live = col < vectors;
    let grad = g[0];
    let zero = Vector::<F, N>::empty().fill(F::new(0.0));

    // 1. This unit's vectors of W, and zeroed accumulators.
    let mut wr = Array::<Vector<F, N>>::new(classes);
    let mut acc = Array::<Vector<F, N>>::new(classes);
    let mut acc_b = Array::<F>::new(classes);
    #[unroll]
    for c in 0..classes {
        acc_b[c] = F::new(0.0);
        let mut v = zero;
        if live {
            v = w[c * vectors + col];
        }
        wr[c] = v;
        acc[c] = zero;
    }

    let mut smem = SharedMemory::<F>::new(stage_rows * classes);
    let mut r0 = row_start;
    // Uniform over the cube: every unit meets every barrier.
    while r0 < row_end {
        // 2. dZ of the next rows into shared memory (stage 3), zero past the chunk.
        let mut e = unit;
        while e < stage_rows * classes {
            let row = r0 + e / classes;
            let mut v = F::new(0.0);
            if row < row_end {
                let idx = row * classes + e % classes;
                v = activation_grad::<F>(z[idx], dh[idx] * grad, relu);
            }
            smem[e] = v;
            e += units;
        }
        sync_cube();

        // 3. Each row: dX of this unit's columns (stage 6), partial dW and db (stages 4, 5).
        let rows_here = select(r0 + stage_rows < row_end, stage_rows, row_end - r0);
        // X of `group` rows in registers, every load issued before the first use, and the next
        // group's loads issued before this group's sums.
        let mut xs = Array::<Vector<E, N>>::new(group);
        load_rows::<E, N>(x, &mut xs, r0, 0, rows_here, col, live, group);
        let mut rr = 0;
        while rr < rows_here {
            let mut next = Array::<Vector<E, N>>::new(group);
            load_rows::<E, N>(x, &mut next, r0, rr + group, rows_here, col, live, group);
            #[unroll]
            for u in 0..group {
                if rr + u < rows_here {
                    let row = r0 + rr + u;
                    let mut d = Array::<F>::new(classes);
                    #[unroll]
                    for c in 0..classes {
                        d[c] = smem[(rr + u) * classes + c];
                        acc_b[c] += d[c];
                    }
                    if live {
                        let xv = Vector::<F, N>::cast_from(xs[u]);
                        let mut s = zero;
                        #[unroll]
                        for c in 0..classes {
                            let dv = Vector::<F, N>::new(d[c]);
                            s += dv * wr[c];
                            acc[c] += dv * xv;
                        }
                        if write_dx {
                            dx[row * vectors + col] = Vector::<E, N>::cast_from(s);
                        }
                    }
                }
            }
            #[unroll]
            for u in 0..group {
                xs[u] = next[u];
            }
            rr += group;
        }
        // Nobody overwrites the staged rows before every unit is done with them.
        sync_cube();
        r0 += stage_rows;
    }

    // 4. This chunk's partial sums.
    if live {
        #[unroll]
        for c in 0..classes {
            dw_part[(chunk * classes + c) * vectors + col] = acc[c];
        }
    }
    if tile == 0 && unit == 0 {
        #[unroll]
        for c in 0..classes {
            db_part[chunk * classes + c] = acc_b[c];
        }
    }
}
