#!/usr/bin/env bash
# Lease G, call 1: the half-precision small-C step kept in two passes (Z, dH in f32, g read by
# the backward kernel) and its load factor, alternated with f32, the peers at (65536, 1024, 10);
# the statistics and the LM terms alternated with the plain step at 32000; the suites, a fuzz.
L=/tmp/leaseG; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
R=$PWD; cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 60 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
for round in 1 2; do
  for row in "65536 1024 10" "65536 1024 10 --bf16" "65536 1024 10 --bf16 --half-loads 1" "65536 1024 10 --bf16 --half-loads 4" \
             "65536 1024 10 --bf16 --identity" "65536 1024 32" "65536 1024 32 --bf16" "65536 1024 32 --bf16 --half-loads 1" \
             "8192 1024 10" "8192 1024 10 --bf16" "64 128 10" "64 128 10 --bf16"; do
    run $row 30 --fusion --phases
  done
done
echo "small done $(date -u)" >> $S
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
ALL="--z-loss 0.0001 --softcap 30 --logit-scale 0.5"
for round in 1 2; do run $B; run $B --token-stats; run $B $ALL; run $B $ALL --token-stats; done
B="8192 4096 32000 --tf32 20 --fusion --timeline"
run $B; run $B $ALL --token-stats; run $B; run $B $ALL --token-stats
echo "large done $(date -u)" >> $S
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for row in "65536 1024 10" "65536 1024 10 --bf16"; do
  f=$L/ncu-$(echo $row | tr ' ' '_').csv
  timeout 60 $NCU --clock-control none --metrics gpu__time_duration.sum --csv --print-units base $P $row 2 --fusion > $f 2>&1; echo "ncu $row rc=$?" >> $S
done
cd $R
echo "=== $(date +%H:%M:%S.%N) peers 65536,1024,10" >> $L/peers.log
PYTHONPATH=/tmp/site timeout 120 python3 .peers/peers_bench.py --shape 65536,1024,10 --csv $L/peers.csv >> $L/peers.log 2>&1
echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
cd $L
setsid bash -c "cd $L; s0=\$(date +%s); FUSED_HEAD_FUZZ_SEED=20261206 FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=60 FUSED_HEAD_FUZZ_LARGE=1 timeout 200 bin/test-fuzz cuda --nocapture --test-threads=1 > $L/fuzz.log 2>&1; echo \"fuzz rc=\$? \$((\$(date +%s)-s0))s\" > $L/fuzz.rc" > /dev/null 2>&1 < /dev/null &
for t in half_precision determinism logit_terms streamed; do
  s0=$(date +%s); timeout 110 bin/test-$t > $L/test-$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
date -u >> $S
mkdir -p $OUT/leaseG; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/leaseG/ 2>/dev/null
cat $L/gpu.txt $S; grep -E "===|medians|back to back|timeline medians" $L/profile.log | cut -c1-220; grep -E "ms|rc=" $L/peers.log | tail -12
grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
