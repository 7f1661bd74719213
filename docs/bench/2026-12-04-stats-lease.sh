#!/usr/bin/env bash
# Lease F: the half-precision small-C step without the upstream gradient's read, ours and the peers at (65536, 1024, 10); the statistics on the plain route (timeline); then the suites.
L=/tmp/leaseF; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
R=$PWD; cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 60 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
for row in "65536 1024 10" "65536 1024 10 --bf16" "65536 1024 10 --bf16 --identity" "65536 1024 10" "65536 1024 10 --bf16" \
           "8192 1024 10" "8192 1024 10 --bf16" "64 128 10" "64 128 10 --bf16"; do
  run $row 20 --fusion --phases
done
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
run $B; run $B --token-stats; run $B --z-loss 0.0001 --token-stats; run $B
echo "ours done $(date -u)" >> $S
cd $R
echo "=== $(date +%H:%M:%S.%N) peers 65536,1024,10" >> $L/peers.log
PYTHONPATH=/tmp/site timeout 150 python3 .peers/peers_bench.py --shape 65536,1024,10 --csv $L/peers.csv >> $L/peers.log 2>&1
echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
cd $L
for t in logit_terms half_precision determinism streamed; do
  s0=$(date +%s); timeout 100 bin/test-$t > $L/test-$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
date -u >> $S
mkdir -p $OUT/leaseF; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/leaseF/ 2>/dev/null
cat $L/gpu.txt $S; grep -E "===|medians|back to back|timeline" $L/profile.log; grep -E "ms|rc=" $L/peers.log | tail -12
grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
