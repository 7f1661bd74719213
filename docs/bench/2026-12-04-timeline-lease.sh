#!/usr/bin/env bash
# Lease 1: where the wall time goes on one GPU timeline (CUDA events), with the GPU's clocks and power sampled.
L=/tmp/lease; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
xz -dc .gpu8/bin/bin-profile.xz > $L/bin/bin-profile; chmod +x $L/bin/bin-profile
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,enforced.power.limit --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE >> $L/gpu.txt 2>&1
cd $L; P=bin/bin-profile
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 50 > $L/smi.csv 2>&1 &
SMI=$!
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 120 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
for row in "8192 4096 32000 --bf16 --identity" "8192 4096 128256 --bf16 --identity" "8192 4096 32000 --tf32" \
           "8192 1024 1000 --bf16 --identity" "8192 1024 1000 --tf32" "8192 1024 1000" "8192 4096 128256 --tf32"; do
  run $row 20 --fusion --timeline --phases
done
kill $SMI
mkdir -p $OUT/lease; cp $L/*.log $L/gpu.txt $L/smi.csv $OUT/lease/ 2>/dev/null
cat $L/profile.log
