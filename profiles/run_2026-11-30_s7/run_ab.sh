#!/usr/bin/env bash
# Run AB (session 7): where the (65536, 1024, 10) step's time goes: kernels in situ vs wall.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
NCU=/usr/local/cuda/bin/ncu
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second
for s in "65536 1024 10" "64 128 10"; do
  n=${s// /_}
  timeout 120 $NCU --clock-control none --cache-control none --metrics $M .gpu/bin/example-profile_head $s 6 > $OUT/ncu_insitu_$n.txt 2>&1
  echo "insitu $n rc $?"
  timeout 120 $NCU --metrics $M -c 12 .gpu/bin/example-profile_head $s 2 > $OUT/ncu_locked_$n.txt 2>&1
  echo "locked $n rc $?"
done
timeout 200 bash .gpu/run bench-head --bench --ours-only --shape 65536,1024,10 --shape 64,128,10 --shape 16384,1024,10 > $OUT/bench.txt 2>&1
echo "bench rc $?"
tail -20 $OUT/bench.txt
