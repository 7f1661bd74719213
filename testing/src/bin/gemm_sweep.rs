//! cuBLASLt's heuristic answers for the streamed path's products at one chunk, each timed:
//! which algorithm the heuristic ranks first, and whether a later one runs faster.
//!
//!   cargo run --release -p burn-fused-head-testing --features cuda --bin gemm_sweep -- ROWS I C [count] [reps]
//!
//! Prints one line per answer (`burn_fused_head::testing::gemm_sweep`); nothing without CUDA.

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("ROWS I C [count] [reps]: whole numbers"))
        .collect();
    let [rows, inputs, classes] = [0, 1, 2].map(|i| *args.get(i).expect("ROWS I C"));
    let count = args.get(3).copied().unwrap_or(16);
    let reps = args.get(4).copied().unwrap_or(7);
    for line in burn_fused_head::testing::gemm_sweep(rows, inputs, classes, count, reps) {
        println!("{line}");
    }
}
