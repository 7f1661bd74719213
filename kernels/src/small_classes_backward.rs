//! Fused backward for a small number of classes: stages 3, 4, 5 and 6 in one kernel, reading
//! each row of X once.
//!
//! X [B, I], W [C, I], Z and dH [B, C], g [1] (the upstream gradient); writes dX [B, I] (when
//! `write_dx`) and, per chunk of rows, partial sums of dW [P, C, I] and db [P, C], which
//! `partial_sum` adds in chunk order afterwards (deterministic, no atomics). All contiguous.
//!
//! Layout: cube (t, p) owns a tile of columns and the rows of chunk p. Unit u of the cube owns
//! the columns `t * U * cols + j * U + u` (U units, j < cols), keeps their C x cols values of W
//! in registers and accumulates their C x cols partial sums of dW over the chunk's rows; no unit
//! ever sums across units. dZ = dH [Z > 0] g is computed once per row and shared through shared
//! memory, `stage_rows` rows at a time.
//!
//! Term by term this is stage 3 (the same select), stage 6 (the same order over c) and stages
//! 4 and 5 with the batch sum split into chunks.

use cubecl::{cube, prelude::*};

/// Rows whose X loads are issued together, before any is used.
const GROUP: usize = 4;

#[cube(launch)]
pub fn small_classes_backward<F: Float>(
    x: &Tensor<F>,
    w: &Tensor<F>,
    z: &Tensor<F>,
    dh: &Tensor<F>,
    g: &Tensor<F>,
    dx: &mut Tensor<F>,
    dw_part: &mut Tensor<F>,
    db_part: &mut Tensor<F>,
    rows_per_chunk: u32,
    #[comptime] classes: usize,
    #[comptime] cols: usize,
    #[comptime] stage_rows: usize,
    #[comptime] write_dx: bool,
) {
    let batch = x.shape(0);
    let inputs = x.shape(1);
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
    let base_col = tile * units * cols + unit;
    let grad = g[0];

    // 1. This unit's columns of W, and zeroed accumulators.
    let mut wr = Array::<F>::new(classes * cols);
    let mut acc = Array::<F>::new(classes * cols);
    let mut acc_b = Array::<F>::new(classes);
    #[unroll]
    for c in 0..classes {
        acc_b[c] = F::new(0.0);
        #[unroll]
        for j in 0..cols {
            let col = base_col + j * units;
            let mut v = F::new(0.0);
            if col < inputs {
                v = w[c * inputs + col];
            }
            wr[c * cols + j] = v;
            acc[c * cols + j] = F::new(0.0);
        }
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
                let zv = z[idx];
                v = select(zv <= F::new(0.0), F::new(0.0), dh[idx] * grad);
            }
            smem[e] = v;
            e += units;
        }
        sync_cube();

        // 3. Each row: dX of this unit's columns (stage 6), partial dW and db (stages 4, 5).
        let rows_here = select(r0 + stage_rows < row_end, stage_rows, row_end - r0);
        let mut rr = 0;
        while rr < rows_here {
            // X of GROUP rows, every load issued before the first use.
            let mut xs = Array::<F>::new(GROUP * cols);
            #[unroll]
            for u in 0..GROUP {
                #[unroll]
                for j in 0..cols {
                    let col = base_col + j * units;
                    let mut v = F::new(0.0);
                    if rr + u < rows_here && col < inputs {
                        v = x[(r0 + rr + u) * inputs + col];
                    }
                    xs[u * cols + j] = v;
                }
            }
            #[unroll]
            for u in 0..GROUP {
                if rr + u < rows_here {
                    let row = r0 + rr + u;
                    let mut d = Array::<F>::new(classes);
                    #[unroll]
                    for c in 0..classes {
                        d[c] = smem[(rr + u) * classes + c];
                        acc_b[c] += d[c];
                    }
                    #[unroll]
                    for j in 0..cols {
                        let col = base_col + j * units;
                        if col < inputs {
                            let xv = xs[u * cols + j];
                            let mut s = F::new(0.0);
                            #[unroll]
                            for c in 0..classes {
                                s += d[c] * wr[c * cols + j];
                                acc[c * cols + j] += d[c] * xv;
                            }
                            if write_dx {
                                dx[row * inputs + col] = s;
                            }
                        }
                    }
                }
            }
            rr += GROUP;
        }
        // Nobody overwrites the staged rows before every unit is done with them.
        sync_cube();
        r0 += stage_rows;
    }

    // 4. This chunk's partial sums.
    #[unroll]
    for c in 0..classes {
        #[unroll]
        for j in 0..cols {
            let col = base_col + j * units;
            if col < inputs {
                dw_part[(chunk * classes + c) * inputs + col] = acc[c * cols + j];
            }
        }
    }
    if tile == 0 && unit == 0 {
        #[unroll]
        for c in 0..classes {
            db_part[chunk * classes + c] = acc_b[c];
        }
    }
}
