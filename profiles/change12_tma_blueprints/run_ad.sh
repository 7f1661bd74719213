#!/usr/bin/env bash
# Run AD (session 7): change 12 sweep, round 2 at (8192, 4096, 32000).
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
A=2,16,2,4,1; K=2,8,4,4,2
for shape in 8192,4096,32000; do
  for bp in 2,16,4,4,1/$K/$K $A/2,16,4,4,1/2,16,4,4,1 $A/2,8,4,4,1/2,8,4,4,1 $A/4,8,4,2,2/4,8,4,2,2 $A/2,8,8,4,2/2,8,8,4,2 4,16,2,2,1/$K/$K; do
    echo "=== $shape $bp"
    FUSED_HEAD_TMA_BP=$bp timeout 100 bash .gpu/run bench-head --bench --tf32-only --shape $shape 2>&1 | grep "^| 8192"
  done
done
