#!/usr/bin/env bash
# Run AK (session 8): the review mend (0aa41c9) and the upfront TMA check on the H200: every test
# executable, the gates example, memcheck on the TF32 logits tests, a TF32 quick look (cubek path
# still taken: the step near change 12's 54.6 ms).
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export RUST_MIN_STACK=33554432
for t in .gpu/bin/test-* .gpu/bin/lib-*; do
  n=$(basename $t)
  timeout 200 $t > $OUT/$n.log 2>&1; echo "$n rc $?"; grep -E "test result|FAILED|panicked" $OUT/$n.log | head -8
done
timeout 60 .gpu/bin/example-gates > $OUT/gates.log 2>&1; echo "gates rc $?"
timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 .gpu/bin/test-parity logits_fast_path > $OUT/memcheck_logits.log 2>&1; echo "memcheck rc $?"; tail -3 $OUT/memcheck_logits.log
timeout 100 bash .gpu/run bench-head --bench --tf32-only --shape 8192,4096,32000 --shape 8192,1024,8000 > $OUT/tf32_quick.txt 2>&1; echo "tf32 rc $?"; grep -E "^\| 8192|gpu" $OUT/tf32_quick.txt
