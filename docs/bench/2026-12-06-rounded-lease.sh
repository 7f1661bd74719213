#!/usr/bin/env bash
# Lease K (2026-12-06, night): rounded bf16 logits (`HeadLogits::Rounded`), checked and measured on
# the GPU. memcheck on the rounded test, the suites the change touches, the default, rounded, lean
# and lean-rounded steps alternated at (8192, 4096, 32000) and (8192, 4096, 128256) in bf16 with
# their pool peaks, one traced run of the default and the rounded step at 32000, the peers at
# both shapes, the remaining suites, the long fuzz on Fusion<Cuda>, then torch.compile at 128256
# if the lease allows.
# Started as `setsid bash docs/bench/2026-12-06-rounded-lease.sh &` from the repo root, each later
# call copying /tmp/leaseK to $OUT until `^all done`.
L=/tmp/leaseK
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh
B=$L/bin
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test-half_precision" bf16_rounded > "$L/memcheck.log" 2>&1
echo "memcheck half_precision bf16_rounded rc=$? $(grep -E 'ERROR SUMMARY|^test result' "$L/memcheck.log" | tr '\n' ' ')" >> "$S"
suite half_precision 300; suite streamed 200; suite determinism 200
echo "suites1 done $(date -u +%T)" >> "$S"
for shape in "8192 4096 32000" "8192 4096 128256"; do
  for round in 1 2; do
    run $shape --bf16 --identity 20 --fusion --phases --memory
    run $shape --bf16 --identity 20 --fusion --phases --memory --rounded
    # The lean mode with f32 logits once (lease J has it twice, in another lease).
    [ $round = 1 ] && run $shape --bf16 --identity 20 --fusion --phases --memory --lean
    run $shape --bf16 --identity 20 --fusion --phases --memory --lean --rounded
  done
done
for mode in "" "--rounded"; do
  run 8192 4096 32000 --bf16 --identity 20 --fusion --timeline $mode
done
echo "profile done $(date -u +%T)" >> "$S"
wait  # the wheels
peers --shape 8192,4096,32000
peers --quick --shape 8192,4096,128256
echo "peers done $(date -u +%T)" >> "$S"
suite logit_terms 200; suite parity 300
echo "suites2 done $(date -u +%T)" >> "$S"
s0=$(date +%s)
FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=150 FUSED_HEAD_FUZZ_LARGE=1 timeout 240 "$B/test-fuzz" cuda_fusion --nocapture --test-threads=1 > "$L/fuzz.log" 2>&1
echo "fuzz rc=$? $(($(date +%s)-s0))s $(grep -E 'cases|^test result' "$L/fuzz.log" | tail -2 | tr '\n' ' ')" >> "$S"
peers --shape 8192,4096,128256
echo "all done $(date -u +%T)" >> "$S"
