#!/usr/bin/env bash
# Run AQ (session 9): row tiles with prefetch / rows-per-cube switches. Tests (defaults: rows
# 64/128 by B, no prefetch), gates; memcheck on the fast-path parity tests with prefetch; a
# sweep of the small-C forward variants by profile_head; ncu on the prefetch forward.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export RUST_MIN_STACK=33554432
for t in .gpu/bin/test-* .gpu/bin/lib-*; do
  n=$(basename $t)
  timeout 240 $t > $OUT/$n.log 2>&1; echo "$n rc $?"; grep -E "test result|FAILED|panicked" $OUT/$n.log | head -8
done
timeout 60 .gpu/bin/example-gates > $OUT/gates.log 2>&1; echo "gates rc $?"; md5sum $OUT/gates.log
FUSED_HEAD_EXPERIMENT_PREFETCH=1 timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 .gpu/bin/test-parity fast > $OUT/memcheck_fast_prefetch.log 2>&1; echo "memcheck prefetch rc $?"; tail -3 $OUT/memcheck_fast_prefetch.log
FUSED_HEAD_EXPERIMENT_PREFETCH=1 FUSED_HEAD_EXPERIMENT_ROWS=64 timeout 60 .gpu/bin/test-parity fast > $OUT/parity_fast_prefetch_r64.log 2>&1; echo "parity fast prefetch r64 rc $?"; grep "test result" $OUT/parity_fast_prefetch_r64.log
