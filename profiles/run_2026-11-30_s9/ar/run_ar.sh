#!/usr/bin/env bash
# Run AR (session 9): the landed row tiles (B >= 16384) + TMA checks in tf32_matmul: every
# test executable, the gates example, memcheck on the fast-path parity tests.
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
