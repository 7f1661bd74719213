#!/usr/bin/env bash
# Run AP (session 9): branch wip/row-tiles-small-c rebased on main + TMA checks moved into
# tma::tf32_matmul + profile_head keep-awake probe. Tests, gates, memcheck; A/B of the row-tiled
# small-C forward (FUSED_HEAD_EXPERIMENT_OLD_FORWARD) by profile_head phases, processes
# alternated; keep-awake probe; ncu on both forwards at (65536, 1024, 10).
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)" 
export RUST_MIN_STACK=33554432
for t in .gpu/bin/test-* .gpu/bin/lib-*; do
  n=$(basename $t)
  timeout 240 $t > $OUT/$n.log 2>&1; echo "$n rc $?"; grep -E "test result|FAILED|panicked" $OUT/$n.log | head -8
done
timeout 60 .gpu/bin/example-gates > $OUT/gates.log 2>&1; echo "gates rc $?"; md5sum $OUT/gates.log
timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 .gpu/bin/test-parity fast > $OUT/memcheck_fast.log 2>&1; echo "memcheck rc $?"; tail -3 $OUT/memcheck_fast.log
echo "== A/B row tiles (new) vs plane-per-rows (old), fusion off, phases"
for round in 1 2; do
  for shape in "64 128 10" "65536 1024 10" "8192 1024 10" "16384 1024 32"; do
    for v in new old; do
      envs=(FUSED_HEAD_PROFILE_PHASES=1); [ $v = old ] && envs+=(FUSED_HEAD_EXPERIMENT_OLD_FORWARD=1)
      echo "-- $shape $v r$round"; env "${envs[@]}" timeout 60 .gpu/bin/example-profile_head $shape 300 2>&1 | grep -E "medians|back to back"
    done
  done
done
echo "== keep-awake probe, fusion off, new forward"
for round in 1 2; do
  for shape in "65536 1024 10" "64 128 10"; do
    for k in awake plain; do
      envs=(FUSED_HEAD_PROFILE_PHASES=1); [ $k = awake ] && envs+=(FUSED_HEAD_PROFILE_KEEP_AWAKE=1)
      echo "-- $shape $k r$round"; env "${envs[@]}" timeout 60 .gpu/bin/example-profile_head $shape 300 2>&1 | grep -E "medians|back to back"
    done
  done
done
echo "== ncu forward at (65536, 1024, 10)"
NCU="/usr/local/cuda/bin/ncu --kernel-name regex:row_tiles_forward|small_classes_forward --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats"
for v in new old; do
  envs=(X=1); [ $v = old ] && envs+=(FUSED_HEAD_EXPERIMENT_OLD_FORWARD=1)
  env "${envs[@]}" timeout 90 $NCU .gpu/bin/example-profile_head 65536 1024 10 3 > $OUT/ncu_forward_$v.txt 2>&1; echo "ncu $v rc $?"
  grep -E "row_tiles_forward|small_classes_forward|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Shared Memory Configuration Size|Block Size|Grid Size" $OUT/ncu_forward_$v.txt | head -24
done
