#!/usr/bin/env bash
# Run AG (session 7): the bench's part A (the default list up to (8192, 1024, 1000)), then the
# logits alone at the two TF32 logits shapes.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 bash .gpu/run bench-head --bench --shape 64,128,10 --shape 4096,512,10 --shape 65536,1024,10 --shape 1024,1024,10 --shape 16384,1024,10 --shape 8192,1024,10 --shape 8192,1024,100 --shape 8192,1024,1000 > $OUT/bench_partA.txt 2> $OUT/bench_partA.err; echo "bench A rc $?"
cat $OUT/bench_partA.txt
timeout 170 bash .gpu/run bench-head --bench --logits --shape 8192,1024,1000 --shape 8192,4096,32000 > $OUT/logits.log 2>&1; echo "logits rc $?"
tail -10 $OUT/logits.log
