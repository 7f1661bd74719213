#!/usr/bin/env bash
# Run AO (session 8): change 14 (launches handed to CubeCL's server thread after each fused op) on
# the H200: every test executable, the gates example, memcheck on the fast-path parity tests, the
# phase timing of the small-C steps.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export RUST_MIN_STACK=33554432
for t in .gpu/bin/test-* .gpu/bin/lib-*; do
  n=$(basename $t)
  timeout 240 $t > $OUT/$n.log 2>&1; echo "$n rc $?"; grep -E "test result|FAILED|panicked" $OUT/$n.log | head -8
done
timeout 60 .gpu/bin/example-gates > $OUT/gates.log 2>&1; echo "gates rc $?"
timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 .gpu/bin/test-parity fast > $OUT/memcheck_fast.log 2>&1; echo "memcheck rc $?"; tail -3 $OUT/memcheck_fast.log
for shape in "64 128 10" "65536 1024 10"; do
  for fusion in 0 1; do
    envs=(FUSED_HEAD_PROFILE_PHASES=1); [ $fusion = 1 ] && envs+=(FUSED_HEAD_PROFILE_FUSION=1)
    echo "== $shape fusion $fusion"; env "${envs[@]}" timeout 60 .gpu/bin/example-profile_head $shape 200 2>&1 | grep -E "medians|back to back"
  done
done
