#!/usr/bin/env bash
# Lease H (2026-12-05 afternoon, build 2ab4ded): the half-precision small-C step in two passes
# checked first (memcheck, its suite), then its timing beside f32, the statistics and the LM terms
# beside the plain step at 32000, the other suites, the peers, ncu. Results copied to $OUT after
# each stage, so a cut-short lease still returns what it finished.
L=/tmp/leaseH; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1 &
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
R=$PWD; cd $L; S=$L/summary; P=bin/bin-profile
save() { mkdir -p $OUT/leaseH; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/leaseH/ 2>/dev/null; echo "saved $1 $(date -u +%T)" >> $S; }
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 60 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
suite() { s0=$(date +%s); timeout $2 bin/test-$1 > $L/test-$1.log 2>&1; rc=$?; echo "$1 rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' $L/test-$1.log | tail -1)" >> $S; }
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 bin/test-half_precision half_forward_keeps > $L/memcheck.log 2>&1; echo "memcheck half_precision rc=$? $(grep -E 'ERROR SUMMARY|^test result' $L/memcheck.log | tr '\n' ' ')" >> $S
suite half_precision 90
save suite1
for row in "65536 1024 10" "65536 1024 10 --bf16" "65536 1024 10 --bf16 --half-loads 1" "65536 1024 10 --bf16 --half-loads 4" \
           "65536 1024 10 --bf16 --identity" "65536 1024 32" "65536 1024 32 --bf16" "65536 1024 32 --bf16 --half-loads 1" \
           "8192 1024 10" "8192 1024 10 --bf16" "64 128 10" "64 128 10 --bf16" \
           "65536 1024 10" "65536 1024 10 --bf16" "65536 1024 10 --bf16 --half-loads 1"; do
  run $row 30 --fusion --phases
done
save small
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
ALL="--z-loss 0.0001 --softcap 30 --logit-scale 0.5"
run $B; run $B --token-stats; run $B $ALL; run $B $ALL --token-stats; run $B; run $B $ALL --token-stats
B="8192 4096 32000 --tf32 20 --fusion --timeline"
run $B; run $B $ALL --token-stats; run $B; run $B $ALL --token-stats
save large
suite logit_terms 100; suite streamed 100; suite determinism 100
save suites
wait
cd $R
echo "=== $(date +%H:%M:%S.%N) peers 65536,1024,10" >> $L/peers.log
PYTHONPATH=/tmp/site timeout 60 python3 .peers/peers_bench.py --quick --shape 65536,1024,10 --csv $L/peers.csv >> $L/peers.log 2>&1
echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
save peers
cd $L
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for row in "65536 1024 10" "65536 1024 10 --bf16"; do
  f=$L/ncu-$(echo $row | tr ' ' '_').csv
  timeout 60 $NCU --clock-control none --metrics gpu__time_duration.sum --csv --print-units base $P $row 2 --fusion > $f 2>&1; echo "ncu $row rc=$?" >> $S
done
date -u >> $S
save ncu
cat $L/gpu.txt $S; grep -E "panicked|FAILED|failed" $L/test-*.log | head -30
