#!/usr/bin/env bash
# Run AT (session 10): small-C backward variants (group, prefetch, stage rows, units, db folded
# into dW's partial sum) and forward row-tile depth, by env switches (experiment build).
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export RUST_MIN_STACK=33554432
declare -A V=( [old]="4,0,32,256,0" [pair]="4,0,32,256,1" [p4]="4,1,128,256,1" [p2u]="2,1,128,128,1" [p4u]="4,1,128,128,1" [p8]="8,1,128,256,1" [s128]="4,0,128,256,1" )
for v in p4 p2u p4u; do
  FUSED_HEAD_EXP_BWD=${V[$v]} timeout 120 .gpu/bin/test-parity fast > $OUT/parity_fast_$v.log 2>&1; echo "parity fast $v rc $?"; grep "test result" $OUT/parity_fast_$v.log
done
FUSED_HEAD_EXP_DEPTH=16 timeout 120 .gpu/bin/test-parity fast > $OUT/parity_fast_d16.log 2>&1; echo "parity fast d16 rc $?"; grep "test result" $OUT/parity_fast_d16.log
echo "== variants (fusion off): CubeCL-profile fwd / bwd medians, back-to-back step, synced step (ms)"
run() { # round shape variant envs...
  local r=$1 shape=$2 v=$3; shift 3
  o=$(env FUSED_HEAD_PROFILE_PHASES=1 "$@" timeout 60 .gpu/bin/example-profile_head $shape 200 2>&1)
  f=$(echo "$o" | grep -oP "CubeCL profile medians \(ms\): forward \K[0-9.]+")
  bw=$(echo "$o" | grep -oP "CubeCL profile medians \(ms\): forward [0-9.]+, backward \K[0-9.]+")
  b=$(echo "$o" | grep -oP "back to back per sync: \K[0-9.]+")
  s=$(echo "$o" | grep -oP "step \(one sync\) \K[0-9.]+")
  echo "r$r $shape $v: fwd $f bwd $bw b2b $b synced $s"
}
for round in 1 2; do
  shapes=("65536 1024 10" "16384 1024 10" "8192 1024 10" "4096 512 10" "65536 1024 32" "65536 1024 4" "1024 1024 10" "64 128 10")
  [ $round = 2 ] && shapes=("65536 1024 10" "16384 1024 10" "65536 1024 32")
  for shape in "${shapes[@]}"; do
    for v in old pair p4 p2u p4u p8 s128; do run $round "$shape" $v FUSED_HEAD_EXP_BWD=${V[$v]}; done
    for d in 4 16; do run $round "$shape" d$d FUSED_HEAD_EXP_DEPTH=$d; done
  done
done
echo "== ncu small_classes_backward at (65536, 1024, 10)"
NCU="/usr/local/cuda/bin/ncu --kernel-name regex:small_classes_backward --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats"
for v in old p4 p2u p4u; do
  FUSED_HEAD_EXP_BWD=${V[$v]} timeout 90 $NCU .gpu/bin/example-profile_head 65536 1024 10 3 > $OUT/ncu_backward_$v.txt 2>&1; echo "ncu $v rc $?"
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Grid Size|Block Size|Warp Cycles Per Issued" $OUT/ncu_backward_$v.txt | head -10
done
