#!/usr/bin/env bash
# Run AF (session 7): change 12 (forced TF32 blueprints per product) on the H200: every test
# executable, the gates example, memcheck on the TF32 parity tests, then the bench's part B.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export RUST_MIN_STACK=33554432
for t in .gpu/bin/test-* .gpu/bin/lib-*; do
  n=$(basename $t)
  timeout 240 $t > $OUT/$n.log 2>&1; echo "$n rc $?"; grep -E "test result|FAILED|panicked" $OUT/$n.log | head -8
done
timeout 60 .gpu/bin/example-gates > $OUT/gates.log 2>&1; echo "gates rc $?"
timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 .gpu/bin/test-parity tf32 > $OUT/memcheck_tf32.log 2>&1; echo "memcheck rc $?"; tail -3 $OUT/memcheck_tf32.log
timeout 300 bash .gpu/run bench-head --bench --shape 8192,1024,8000 --shape 8192,4096,32000 > $OUT/bench_partB.txt 2> $OUT/bench_partB.err; echo "bench B rc $?"
cat $OUT/bench_partB.txt
