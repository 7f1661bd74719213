#!/usr/bin/env bash
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Run AQ part 2: the variant sweep and ncu.
echo "== variants (fusion off): CubeCL-profile forward median, back-to-back step, synced step (ms)"
for round in 1 2; do
shapes=("65536 1024 10" "32768 1024 10" "16384 1024 10" "8192 1024 10" "16384 1024 32" "65536 1024 32" "64 128 10")
[ $round = 2 ] && shapes=("65536 1024 10" "32768 1024 10" "16384 1024 32")
for shape in "${shapes[@]}"; do
  for v in old r64 r64p r128p r32p; do
    envs=(FUSED_HEAD_PROFILE_PHASES=1)
    case $v in
      old) envs+=(FUSED_HEAD_EXPERIMENT_OLD_FORWARD=1);;
      r64) envs+=(FUSED_HEAD_EXPERIMENT_ROWS=64);;
      r128) envs+=(FUSED_HEAD_EXPERIMENT_ROWS=128);;
      r64p) envs+=(FUSED_HEAD_EXPERIMENT_ROWS=64 FUSED_HEAD_EXPERIMENT_PREFETCH=1);;
      r128p) envs+=(FUSED_HEAD_EXPERIMENT_ROWS=128 FUSED_HEAD_EXPERIMENT_PREFETCH=1);;
      r32p) envs+=(FUSED_HEAD_EXPERIMENT_ROWS=32 FUSED_HEAD_EXPERIMENT_PREFETCH=1);;
    esac
    o=$(env "${envs[@]}" timeout 60 .gpu/bin/example-profile_head $shape 200 2>&1)
    f=$(echo "$o" | grep -oP "CubeCL profile medians \(ms\): forward \K[0-9.]+")
    b=$(echo "$o" | grep -oP "back to back per sync: \K[0-9.]+")
    s=$(echo "$o" | grep -oP "step \(one sync\) \K[0-9.]+")
    echo "r$round $shape $v: fwd $f b2b $b synced $s"
  done
done
done
echo "== ncu forward at (65536, 1024, 10), r64p and r128p"
NCU="/usr/local/cuda/bin/ncu --kernel-name regex:row_tiles_forward --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats"
for r in 64 128; do
  FUSED_HEAD_EXPERIMENT_ROWS=$r FUSED_HEAD_EXPERIMENT_PREFETCH=1 timeout 90 $NCU .gpu/bin/example-profile_head 65536 1024 10 3 > $OUT/ncu_forward_r${r}p.txt 2>&1; echo "ncu r${r}p rc $?"
  grep -E "row_tiles_forward|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Grid Size|Warp Cycles Per Issued" $OUT/ncu_forward_r${r}p.txt | head -10
done
