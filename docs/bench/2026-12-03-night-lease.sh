#!/usr/bin/env bash
# Final lease, call A: unpack the test binaries and the profile tool to /tmp/lease/bin, run the suites.
L=/tmp/lease; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu7/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu7/rev >> $L/gpu.txt
cd $L; S=$L/summary
for t in streamed half_precision logit_terms edge_cases loss_options determinism module; do
  s0=$(date +%s); timeout 150 bin/test-$t > $L/test-$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
date -u >> $S
mkdir -p $OUT/lease; cp $L/*.log $L/summary $L/gpu.txt $OUT/lease/
cat $L/gpu.txt $S
grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
#!/usr/bin/env bash
# Final lease, call B: the fuzz replay and long run on CUDA, memcheck.
L=/tmp/lease; cd $L; S=$L/summary
s0=$(date +%s); timeout 150 bin/test-parity cuda > $L/test-parity.log 2>&1; echo "parity(cuda) rc=$? $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-parity.log | tail -1)" >> $S
FUSED_HEAD_FUZZ_SEED=875110520 FUSED_HEAD_FUZZ_CASES=1 timeout 40 bin/test-fuzz cuda --nocapture > $L/fuzz-replay.log 2>&1; echo "fuzz replay 875110520 rc=$? $(grep -E 'cases in|^test result' $L/fuzz-replay.log | tr '\n' ' ')" >> $S
s0=$(date +%s); FUSED_HEAD_FUZZ_SEED=2026 FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=60 FUSED_HEAD_FUZZ_LARGE=1 timeout 250 bin/test-fuzz cuda --nocapture > $L/fuzz-long.log 2>&1; echo "fuzz long rc=$? $(($(date +%s)-s0))s $(grep -E 'cases in|^test result' $L/fuzz-long.log | tr '\n' ' ')" >> $S
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 bin/test-streamed one_timeline_gives_the_host_ordered_bits_raw > $L/memcheck.log 2>&1; echo "memcheck streamed rc=$? $(grep -E 'ERROR SUMMARY|^test result' $L/memcheck.log | tr '\n' ' ')" >> $S
date -u >> $S
mkdir -p $OUT/lease; cp $L/*.log $L/summary $L/gpu.txt $OUT/lease/
cat $S
grep -E "panicked|FAILED|failed|seed" $L/fuzz-*.log | head -30
#!/usr/bin/env bash
# Final lease, call C: issue 30's rows and the LM terms (this build), kernel durations, then the peers, same lease.
L=/tmp/lease; cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1
cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $*" >> $L/profile.log; timeout 100 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|memory:|panicked|rror" >> $L/profile.log; }
for row in "8192 1024 1000" "8192 1024 1000 --tf32" "8192 1024 1000 --bf16 --identity" \
           "8192 4096 32000 --tf32" "8192 4096 32000 --bf16 --identity" \
           "8192 4096 128256 --tf32" "8192 4096 128256 --bf16 --identity" "8192 4096 32000"; do
  run $row 20 --fusion --phases --memory
done
B="8192 4096 32000 --bf16 --identity 20 --phases"
for rep in 1; do run $B --fusion --z-loss 0.0001 --softcap 30; run $B --fusion --logit-scale 0.5; run $B --fusion; done
for row in "8192 4096 32000 --bf16 --identity" "8192 4096 32000 --tf32" "8192 4096 128256 --bf16 --identity"; do
  s0=$(date +%s%N); timeout 60 $P $row 1 --fusion > /dev/null 2>&1; echo "first process, one step: $row $(( ($(date +%s%N) - s0) / 1000000 )) ms" >> $L/first.log
done
B="8192 4096 32000 --bf16 --identity 20 --phases"
run $B --fusion --softcap 30; run $B --fusion --z-loss 0.0001
echo "ours done $(date -u)" >> $S
mkdir -p $OUT/lease; cp $L/*.log $L/summary $L/gpu.txt $OUT/lease/ 2>/dev/null
cat $S $L/first.log; grep -E "===|medians|memory" $L/profile.log
#!/usr/bin/env bash
# Final lease, call D: kernel durations (Nsight Compute), then the peers, same lease.
L=/tmp/lease; cd "$(dirname "$0")/.."
cd $L; S=$L/summary; P=bin/bin-profile
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for row in "8192 4096 32000 --bf16 --identity" "8192 4096 128256 --bf16 --identity"; do
  f=$L/ncu-$(echo $row | tr ' ' '_' | tr -d '-').csv
  timeout 100 $NCU --clock-control none --metrics gpu__time_duration.sum --csv --print-units base $P $row 2 --fusion > $f 2>&1; echo "ncu $row rc=$?" >> $S
done
cd "$OLDPWD"
for shape in 8192,4096,32000 8192,4096,128256; do
  PYTHONPATH=/tmp/site timeout 150 python3 .peers/peers_bench.py --shape $shape --csv $L/peers.csv >> $L/peers.log 2>&1
done
echo "peers done $(date -u)" >> $S
mkdir -p $OUT/lease; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/lease/ 2>/dev/null
cat $S; tail -5 $L/peers.log
