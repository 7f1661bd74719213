#!/usr/bin/env bash
# Lease M (2026-12-07, second session): issue 30's table again on the final code (the packs of
# `b79a43e`, whose `src/` is that of `72ec941`), then what lease L could not reach: the suites,
# the second round and the fingerprint of the default's bits. The order: ours, the peers, the
# traced timelines of the missed rows; memcheck, the fingerprint, the suites, the long fuzz;
# the second round. The same steps as `2026-12-07-issue30-lease.sh`, reordered so that the
# correctness checks come before the second round.
# `$1` picks the parts: `table` (ours, the peers, the timelines), `checks` (memcheck, the
# fingerprint, the suites, the long fuzz), `all` (both, then the second round), `checks-first`
# (the checks, then the table): with devices scarce, the checks come first on an H100, the
# table first on the H200 the issue names.
# Started as `setsid bash docs/bench/2026-12-07-m-lease.sh PART &` from the repo root; each
# call packs /tmp/leaseM (less its executables) into one archive under $OUT until `^all done`.
PART=${1:-all}
L=/tmp/leaseM
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh
B=$L/bin
for f in .gpu8/bin/bin-fingerprint*.xz; do
  n=$(basename "${f%.xz}"); xz -dc "$f" > "$B/$n"; chmod +x "$B/$n"
done
# docs/bench/power.py's samples through the lease.
setsid -f nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 50 > "$L/smi.csv" 2>&1 < /dev/null
# Ours: issue 30's rows (f32 and TF32 with ReLU, bf16 with the identity at C >= 1000 and with
# ReLU at C = 10), the modes of bf16 at the LM shapes, the small-C pairs of item 6; a second
# round at the end if the lease lasts.
ours() {
  run 8192 1024 1000 20 --fusion --phases --memory
  run 8192 1024 1000 --tf32 20 --fusion --phases --memory
  run 8192 1024 1000 --bf16 --identity 20 --fusion --phases --memory
  run 65536 1024 10 20 --fusion --phases --memory
  run 65536 1024 10 --bf16 20 --fusion --phases --memory
  run 65536 1024 10 --bf16 --identity 20 --fusion --phases --memory
  run 8192 1024 10 20 --fusion --phases --memory
  run 8192 1024 10 --bf16 20 --fusion --phases --memory
  for c in 32000 128256; do
    run 8192 4096 $c --tf32 20 --fusion --phases --memory
    run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory
    run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory --rounded
    run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory --lean --rounded
    [ "$1" = 1 ] && run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory --lean
  done
  [ "$1" = 1 ] && run 8192 4096 32000 20 --fusion --phases --memory
  echo "ours round $1 done $(date -u +%T)" >> "$S"
}
table() {
ours 1
wait  # the wheels
peers --shape 8192,1024,1000 --shape 65536,1024,10 --shape 8192,4096,32000 --shape 8192,4096,128256
echo "peers done $(date -u +%T)" >> "$S"
# The profile of each row that misses its target: one traced run each.
run 8192 1024 1000 20 --fusion --timeline
run 8192 1024 1000 --tf32 20 --fusion --timeline
run 8192 1024 1000 --bf16 --identity 20 --fusion --timeline
for c in 32000 128256; do
  run 8192 4096 $c --tf32 20 --fusion --timeline
  run 8192 4096 $c --bf16 --identity 20 --fusion --timeline
  run 8192 4096 $c --bf16 --identity 20 --fusion --timeline --rounded
done
run 8192 4096 32000 5 --fusion --timeline
echo "timelines done $(date -u +%T)" >> "$S"
pkill -f "nvidia-smi --query-gpu=timestamp"
}
checks() {
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test-half_precision" bf16_rounded > "$L/memcheck.log" 2>&1
echo "memcheck half_precision bf16_rounded rc=$? $(grep -E 'ERROR SUMMARY|^test result' "$L/memcheck.log" | tr '\n' ' ')" >> "$S"
# The default's bits: this build against the build of fb71f28 (before rounded logits).
for f in fingerprint fingerprint-old; do
  timeout 120 "$B/bin-$f" > "$L/$f.txt" 2> "$L/$f.err"
  echo "$f rc=$? $(wc -l < "$L/$f.txt") lines" >> "$S"
done
echo "fingerprint diff: $(diff "$L/fingerprint-old.txt" "$L/fingerprint.txt" | grep -c '^[<>]') lines differ" >> "$S"
suite half_precision 300; suite determinism 200; suite streamed 200; suite logit_terms 200
suite parity 300; suite edge_cases 300
echo "suites done $(date -u +%T)" >> "$S"
s0=$(date +%s)
FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=150 FUSED_HEAD_FUZZ_LARGE=1 timeout 240 "$B/test-fuzz" cuda_fusion --nocapture --test-threads=1 > "$L/fuzz.log" 2>&1
echo "fuzz rc=$? $(($(date +%s)-s0))s $(grep -E 'cases|^test result' "$L/fuzz.log" | tail -2 | tr '\n' ' ')" >> "$S"
}
case "$PART" in
  table) table ;;
  checks) checks ;;
  checks-first) checks; table ;;
  all) table; checks; ours 2 ;;
esac
echo "all done $(date -u +%T)" >> "$S"
