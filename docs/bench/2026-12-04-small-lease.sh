#!/usr/bin/env bash
# Lease E: bf16 and f16 at C <= 32 read natively (issue 30 item 6): ours f32/bf16/f16 and the peers at (65536, 1024, 10), one lease; then the suites.
L=/tmp/leaseE; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
R=$PWD; cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 60 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|memory:|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
for row in "65536 1024 10" "65536 1024 10 --bf16" "65536 1024 10 --bf16 --identity" "65536 1024 10" "65536 1024 10 --bf16" \
           "8192 1024 10" "8192 1024 10 --bf16" "64 128 10" "64 128 10 --bf16"; do
  run $row 20 --fusion --phases --memory
done
echo "ours done $(date -u)" >> $S
cd $R
echo "=== $(date +%H:%M:%S.%N) peers 65536,1024,10" >> $L/peers.log
PYTHONPATH=/tmp/site timeout 150 python3 .peers/peers_bench.py --shape 65536,1024,10 --csv $L/peers.csv >> $L/peers.log 2>&1
echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
cd $L
for t in half_precision determinism edge_cases; do
  s0=$(date +%s); timeout 100 bin/test-$t > $L/test-$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
s0=$(date +%s); timeout 150 bin/test-parity cuda > $L/test-parity.log 2>&1; echo "parity(cuda) rc=$? $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-parity.log | tail -1)" >> $S
date -u >> $S
mkdir -p $OUT/leaseE; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/leaseE/ 2>/dev/null
cat $L/gpu.txt $S; grep -E "===|medians|back to back|memory" $L/profile.log; grep -E "ms|rc=" $L/peers.log | tail -12
grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
