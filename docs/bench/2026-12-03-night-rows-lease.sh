#!/usr/bin/env bash
# Lease 1: the vectorised row kernel against the build before it (0d9c4b8), same lease.
L=/tmp/lease; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu7/bin/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu7/rev >> $L/gpu.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu); echo "ncu: $NCU" >> $L/gpu.txt
cd $L; S=$L/summary
run() { echo "=== $*" >> $L/profile.log; timeout 100 "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|memory:|panicked|rror" >> $L/profile.log; }
for row in "8192 4096 32000 --bf16 --identity" "8192 4096 32000 --tf32" "8192 4096 32000 --bf16 --identity --z-loss 0.0001 --softcap 30" \
           "8192 4096 128256 --bf16 --identity" "8192 4096 128256 --tf32" "8192 1024 1000 --tf32"; do
  for rep in 1 2; do
    run bin/bin-profile-old $row 20 --fusion --phases
    run bin/bin-profile $row 20 --fusion --phases
  done
done
echo "profile done $(date -u)" >> $S
for v in bin-profile-old bin-profile; do
  timeout 120 $NCU --clock-control none --kernel-name regex:streamed_rows --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    bin/$v 8192 4096 32000 --bf16 --identity 2 --fusion > $L/ncu-$v.log 2>&1
  echo "ncu $v rc=$?" >> $S
done
mkdir -p $OUT/lease; cp $L/*.log $L/summary $L/gpu.txt $OUT/lease/
cat $L/gpu.txt $S; cat $L/profile.log | grep -E "===|medians|rror|panick"
for v in bin-profile-old bin-profile; do grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|==PROF==|rror" $L/ncu-$v.log | head -20; done
