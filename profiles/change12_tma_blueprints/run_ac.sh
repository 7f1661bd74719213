#!/usr/bin/env bash
# Run AC (session 7): change 12 sweep, a TF32 blueprint per product (logits/dw/dx), per shape.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
A=2,16,2,4,1; K=2,8,4,4,2
for shape in 8192,4096,32000 8192,1024,8000 8192,1024,1000 8192,1024,100; do
  for bp in i/i/i $A/$K/$K $A/$A/$K $A/$K/$A $K/$K/$K; do
    echo "=== $shape $bp"
    FUSED_HEAD_TMA_BP=$bp timeout 100 bash .gpu/run bench-head --bench --tf32-only --shape $shape 2>&1 | grep "^| 8192"
  done
done
