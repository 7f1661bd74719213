#!/usr/bin/env bash
# The benchmark, one part of the shape list per device command (each part one process; each
# shape's contenders side by side in it): bash gpu-runs/run_bench.sh <part name> --shape ... 
cd "$(dirname "$0")/.."
name=$1; shift
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 570 bash .gpu/run bench-head --bench "$@" > $OUT/bench_$name.txt 2> $OUT/bench_$name.err; echo "rc $?"
cat $OUT/bench_$name.txt
