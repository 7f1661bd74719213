#!/usr/bin/env bash
# Lease N (2026-12-07, third session): cuBLASLt's heuristic answers for the streamed path's
# products, each timed alone (`gemm_sweep`), then the whole TF32 step with dW on each of the
# first answers (`profile --dw-answer K`), alternating; with `all`, lease M's table and checks
# after it on the same build (no second round). The lease ran `sweep` on an H100. As it ran,
# the `rc=` after each sweep is `date`'s status, not the sweep's (each sweep's lines are
# complete in its log).
# Started as `setsid bash docs/bench/2026-12-07-n-lease.sh PART &` from the repo root (PART:
# `sweep` or `all`); each call packs /tmp/leaseN (less its executables) into one archive
# under $OUT until `^all done`.
PART=${1:-sweep}
L=/tmp/leaseN
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
xz -dc .gpu8/bin/bin-gemm_sweep.xz > "$L/bin/bin-gemm_sweep"; chmod +x "$L/bin/bin-gemm_sweep"
unpack_fingerprints
sample_power
sweep() {
  local shape
  for shape in "1024 4096 128256" "2048 4096 32000"; do
    echo "=== $(date +%H:%M:%S.%N) gemm_sweep $shape 12 5" >> "$L/sweep.log"
    timeout 300 "$L/bin/bin-gemm_sweep" $shape 12 5 >> "$L/sweep.log" 2>&1
    echo "--- $(date +%H:%M:%S.%N) rc=$?" >> "$L/sweep.log"
  done
  echo "sweep done $(date -u +%T)" >> "$S"
  local round k
  for round in 1 2; do
    for k in 0 1 2 3 4 5; do
      run 8192 4096 128256 --tf32 12 --fusion --phases --dw-answer $k
      run 8192 4096 32000 --tf32 12 --fusion --phases --dw-answer $k
    done
  done
  echo "answers done $(date -u +%T)" >> "$S"
}
case "$PART" in
  sweep) sweep ;;
  all)
    sweep
    issue30_rows 1; wait; issue30_peers; issue30_timelines
    memcheck_rounded; fingerprints
    suite half_precision 300; suite determinism 200; suite streamed 200; suite logit_terms 200
    suite parity 300; suite edge_cases 300
    echo "suites done $(date -u +%T)" >> "$S"
    long_fuzz ;;
esac
stop_power
echo "all done $(date -u +%T)" >> "$S"
