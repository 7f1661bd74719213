#!/usr/bin/env bash
# Run AL (session 8): where the host time of the small-C steps goes (Nsight Systems: CUDA API calls,
# memory operations and kernels of 20 synced steps), then Nsight Compute on cubek's three TF32 products.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
echo "nsys: $NSYS"
for shape in "65536 1024 10" "64 128 10"; do
  for fusion in 0 1; do
    tag=$(echo $shape | tr ' ' _)_fusion$fusion
    envs=(); [ $fusion = 1 ] && envs=(FUSED_HEAD_PROFILE_FUSION=1)
    env "${envs[@]}" timeout 120 $NSYS profile -t cuda,osrt --stats=true --force-overwrite true -o $OUT/nsys_$tag .gpu/bin/example-profile_head $shape 30 > $OUT/nsys_$tag.txt 2>&1
    echo "$tag rc $?"
  done
done
rm -f $OUT/*.qdrep $OUT/*.sqlite $OUT/*.nsys-rep
exit 0
NCU="/usr/local/cuda/bin/ncu --kernel-name regex:^matmul_entry --launch-count 3 --section SpeedOfLight --section Occupancy --section LaunchStats --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed"
timeout 150 $NCU .gpu/bin/bench-head --bench --tf32-only --shape 8192,4096,32000 > $OUT/ncu_8192_4096_32000_tf32_change12.txt 2>&1; echo "ncu rc $?"
grep -E "matmul_entry|Duration|hmma|Registers Per|Achieved Occupancy|Memory Throughput|inst_issued|lts__t_sectors" $OUT/ncu_8192_4096_32000_tf32_change12.txt | head -40
