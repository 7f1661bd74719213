#!/usr/bin/env bash
# Lease O (2026-12-07, third session): TF32 dW on the wide-tile answer (`Pick::WideTile`,
# src/cube/cublaslt.rs) against the heuristic's first answer (`--dw-answer 0`, the rule
# before it) at the LM shapes (one round: lease N ran the answers in two); then the checks on
# this build, those that bear on the rule first (the device budget was nearly spent): the
# determinism and streamed suites, the fingerprint against the build of lease N (a09c7da plus
# the testing tools: the default's bits before the rule), memcheck on the streamed TF32 bits
# test, `edge_cases`, `logit_terms`, `half_precision`, the long fuzz, `parity`; last, one
# traced step at 128256. The budget ended in `half_precision`.
# Started as `setsid bash docs/bench/2026-12-07-o-lease.sh &` from the repo root; each call
# packs /tmp/leaseO (less its executables) into one archive under $OUT until `^all done`.
L=/tmp/leaseO
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
unpack_fingerprints
sample_power
for c in 128256 32000; do
  run 8192 4096 $c --tf32 12 --fusion --phases
  run 8192 4096 $c --tf32 12 --fusion --phases --dw-answer 0
done
echo "answers done $(date -u +%T)" >> "$S"
suite determinism 200; suite streamed 200
fingerprints
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$L/bin/test-streamed" cuda_raw::streamed_path_gives_the_same_bits_every_call > "$L/memcheck.log" 2>&1
echo "memcheck streamed same_bits rc=$? $(grep -E 'ERROR SUMMARY|^test result' "$L/memcheck.log" | tr '\n' ' ')" >> "$S"
suite edge_cases 300; suite logit_terms 200; suite half_precision 300
long_fuzz
suite parity 300
run 8192 4096 128256 --tf32 12 --fusion --timeline
stop_power
echo "all done $(date -u +%T)" >> "$S"
