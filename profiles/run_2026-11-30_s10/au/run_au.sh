#!/usr/bin/env bash
# Run AU (session 10): change 16 landed (small-C backward: prefetch, 8- or 4-row groups, 128-row
# stages, dW and db sums in one launch): every test executable, the gates example, memcheck on
# the fast-path parity tests, profile_head at three shapes.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export RUST_MIN_STACK=33554432
for t in .gpu/bin/test-* .gpu/bin/lib-*; do
  n=$(basename $t)
  timeout 240 $t > $OUT/$n.log 2>&1; echo "$n rc $?"; grep -E "test result|FAILED|panicked" $OUT/$n.log | head -8
done
timeout 60 .gpu/bin/example-gates > $OUT/gates.log 2>&1; echo "gates rc $?"; md5sum $OUT/gates.log
timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 .gpu/bin/test-parity fast > $OUT/memcheck_fast.log 2>&1; echo "memcheck rc $?"; tail -3 $OUT/memcheck_fast.log
for shape in "65536 1024 10" "16384 1024 10" "65536 1024 32"; do
  o=$(FUSED_HEAD_PROFILE_PHASES=1 timeout 60 .gpu/bin/example-profile_head $shape 200 2>&1)
  echo "$shape: $(echo "$o" | grep -E "CubeCL profile medians|back to back" | tr '\n' ' ')"
done
NCU="/usr/local/cuda/bin/ncu --kernel-name regex:small_classes_backward|partial_sum --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats"
timeout 90 $NCU .gpu/bin/example-profile_head 65536 1024 10 3 > $OUT/ncu_backward_65536_1024_10.txt 2>&1; echo "ncu rc $?"
grep -E "small_classes_backward|partial_sum|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Grid Size|Block Size" $OUT/ncu_backward_65536_1024_10.txt | head -20
