#!/usr/bin/env bash
# Run AE (session 7): change 12 sweep, round 3: the gradients' blueprint, then the best at every C > 32 shape.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
A=2,16,2,4,1; K=2,8,4,4,2; F=2,16,4,4,1; G=4,8,4,2,2
run() { echo "=== $1 $2"; FUSED_HEAD_TMA_BP=$2 timeout 100 bash .gpu/run bench-head --bench --tf32-only --shape $1 2>&1 | grep "^| 8192"; }
S=8192,4096,32000
for bp in $F/$G/$G $A/$G/$K $A/$K/$G $A/4,16,4,2,1/4,16,4,2,1 $A/4,8,4,2,1/4,8,4,2,1 $A/8,8,4,1,2/8,8,4,1,2 $G/$G/$G; do run $S $bp; done
for s in 8192,1024,8000 8192,1024,1000 8192,1024,100; do run $s i/i/i; run $s $F/$G/$G; done
