#!/usr/bin/env bash
# Lease I (2026-12-06, night): the final code of issue 33 and issue 30's item 6 checked on the
# GPU. The suites the last changes touch first (memcheck on the half-precision test), then the
# statistics and the LM terms beside the plain step at 32000 (bf16, TF32), the two other suites
# the changes touch, the small-C bf16 step beside f32, the peers at (65536, 1024, 10), the other
# suites, a fuzz on Fusion<Cuda>. Run on an H100 on 2026-12-06 as
# `setsid bash docs/bench/2026-12-06-h100-lease.sh &` (its first name: 2026-12-06-lease.sh),
# each call copying /tmp/leaseI to $OUT; later calls waited for `^all done` in the summary (the
# first call's wait, on `all done`, also matched `small done` and returned early).
L=/tmp/leaseI; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/../.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1 &
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
R=$PWD; cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 60 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
suite() { s0=$(date +%s); timeout $2 bin/test-$1 > $L/test-$1.log 2>&1; rc=$?; echo "$1 rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$1.log | tail -1)" >> $S; }
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 bin/test-half_precision half_forward_keeps > $L/memcheck.log 2>&1; echo "memcheck half_precision rc=$? $(grep -E 'ERROR SUMMARY|^test result' $L/memcheck.log | tr '\n' ' ')" >> $S
suite half_precision 100; suite logit_terms 100
echo "saved suites1 $(date -u +%T)" >> $S
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
ALL="--z-loss 0.0001 --softcap 30 --logit-scale 0.5"
for round in 1 2; do run $B; run $B --token-stats; run $B $ALL; run $B $ALL --token-stats; done
B="8192 4096 32000 --tf32 20 --fusion --timeline"
for round in 1 2; do run $B; run $B $ALL --token-stats; done
echo "large done $(date -u +%T)" >> $S
suite streamed 100; suite determinism 120
for round in 1 2; do
  for row in "65536 1024 10" "65536 1024 10 --bf16" "65536 1024 10 --bf16 --identity" "8192 1024 10" "8192 1024 10 --bf16"; do
    run $row 30 --fusion --phases
  done
done
echo "small done $(date -u +%T)" >> $S
wait
cd $R
echo "=== $(date +%H:%M:%S.%N) peers 65536,1024,10" >> $L/peers.log
PYTHONPATH=/tmp/site timeout 90 python3 .peers/peers_bench.py --quick --shape 65536,1024,10 --csv $L/peers.csv >> $L/peers.log 2>&1
echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
cd $L
echo "peers done $(date -u +%T)" >> $S
suite parity 200; suite edge_cases 120; suite loss_options 120
s0=$(date +%s); FUSED_HEAD_FUZZ_SEED=20261207 FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=60 FUSED_HEAD_FUZZ_LARGE=1 timeout 120 bin/test-fuzz cuda_fusion --nocapture --test-threads=1 > $L/fuzz.log 2>&1; echo "fuzz rc=$? $(($(date +%s)-s0))s $(grep -E 'cases|^test result' $L/fuzz.log | tail -2 | tr '\n' ' ')" >> $S
echo "all done $(date -u +%T)" >> $S
