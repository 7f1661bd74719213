#!/usr/bin/env bash
# Lease D, call 1: the LM terms' cost on the plain route (timeline, alternated with the plain step), then the suites with the long fuzz in the background.
L=/tmp/leaseD; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 100 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|memory:|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
run $B; run $B --z-loss 0.0001; run $B --softcap 30; run $B --z-loss 0.0001 --softcap 30 --logit-scale 0.5; run $B; run $B --z-loss 0.0001
B="8192 4096 32000 --tf32 20 --fusion --timeline"
run $B; run $B --softcap 30; run $B --z-loss 0.0001; run $B
echo "profile done $(date -u)" >> $S
setsid bash -c "cd $L; s0=\$(date +%s); FUSED_HEAD_FUZZ_SEED=20261205 FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=150 FUSED_HEAD_FUZZ_LARGE=1 timeout 420 bin/test-fuzz cuda --nocapture --test-threads=1 > $L/fuzz-long.log 2>&1; echo \"fuzz long rc=\$? \$((\$(date +%s)-s0))s\" > $L/fuzz-long.rc" > /dev/null 2>&1 < /dev/null &
for t in logit_terms streamed half_precision determinism loss_options; do
  s0=$(date +%s); timeout 110 bin/test-$t > $L/test-$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
date -u >> $S
mkdir -p $OUT/leaseD; cp $L/*.log $L/summary $L/gpu.txt $OUT/leaseD/
cat $L/gpu.txt $S; grep -E "===|timeline|memory" $L/profile.log
grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
#!/usr/bin/env bash
# Lease D, call 2: memcheck on the unweighted LM-terms step (raw CUDA), the long fuzz's end.
L=/tmp/leaseD; cd $L; S=$L/summary
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 bin/test-logit_terms cuda_raw::a_step_takes_the_logit_terms_without_row_weights > $L/memcheck.log 2>&1; echo "memcheck logit_terms rc=$? $(grep -E 'ERROR SUMMARY|^test result' $L/memcheck.log | tr '\n' ' ')" >> $S
for k in $(seq 1 80); do [ -f $L/fuzz-long.rc ] && break; sleep 5; done
cat $L/fuzz-long.rc >> $S 2>/dev/null || echo "fuzz long: still running" >> $S
grep -E 'cases in|^test result' $L/fuzz-long.log >> $S
date -u >> $S
mkdir -p $OUT/leaseD; cp $L/*.log $L/summary $L/gpu.txt $OUT/leaseD/
cat $S
grep -E "panicked|FAILED|failed|seed" $L/fuzz-*.log | head -30
