#!/usr/bin/env bash
# Tests lease, call 1: unpack, start the long fuzz (both CUDA backends, 150 s each) in the background, run the suites.
L=/tmp/leaseC; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
cd $L; S=$L/summary
setsid bash -c "cd $L; s0=\$(date +%s); FUSED_HEAD_FUZZ_SEED=20261204 FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=150 FUSED_HEAD_FUZZ_LARGE=1 timeout 420 bin/test-fuzz cuda --nocapture --test-threads=1 > $L/fuzz-long.log 2>&1; echo \"fuzz long rc=\$? \$((\$(date +%s)-s0))s\" > $L/fuzz-long.rc" > /dev/null 2>&1 < /dev/null &
for t in logit_terms streamed half_precision loss_options determinism edge_cases module; do
  s0=$(date +%s); timeout 150 bin/test-$t > $L/test-$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
date -u >> $S
mkdir -p $OUT/leaseC; cp $L/*.log $L/summary $L/gpu.txt $OUT/leaseC/
cat $L/gpu.txt $S
grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
#!/usr/bin/env bash
# Tests lease, call 2: the fuzz replay, memcheck, the long fuzz's end, then the LM terms' cost (timeline) on the idle GPU.
L=/tmp/leaseC; cd $L; S=$L/summary; P=bin/bin-profile
FUSED_HEAD_FUZZ_SEED=875110520 FUSED_HEAD_FUZZ_CASES=1 timeout 40 bin/test-fuzz cuda --nocapture > $L/fuzz-replay.log 2>&1; echo "fuzz replay 875110520 rc=$? $(grep -E 'cases in|^test result' $L/fuzz-replay.log | tr '\n' ' ')" >> $S
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 bin/test-streamed one_timeline_gives_the_host_ordered_bits_raw > $L/memcheck.log 2>&1; echo "memcheck streamed rc=$? $(grep -E 'ERROR SUMMARY|^test result' $L/memcheck.log | tr '\n' ' ')" >> $S
for k in $(seq 1 80); do [ -f $L/fuzz-long.rc ] && break; sleep 5; done
cat $L/fuzz-long.rc >> $S 2>/dev/null || echo "fuzz long: still running" >> $S
grep -E 'cases in|^test result' $L/fuzz-long.log >> $S
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 120 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
if [ ! -f $L/fuzz-long.rc ]; then echo "profile skipped: fuzz still running" >> $S; else
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
run $B; run $B --softcap 30; run $B --logit-scale 0.5; run $B --softcap 30 --logit-scale 0.5; run $B --z-loss 0.0001; run $B
B="8192 4096 32000 --tf32 20 --fusion --timeline"
run $B; run $B --softcap 30
fi
date -u >> $S
mkdir -p $OUT/leaseC; cp $L/*.log $L/summary $L/gpu.txt $OUT/leaseC/
cat $S; grep -E "===|timeline" $L/profile.log
grep -E "panicked|FAILED|failed|seed" $L/fuzz-*.log | head -30
