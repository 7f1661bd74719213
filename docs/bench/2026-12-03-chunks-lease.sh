#!/usr/bin/env bash
# Lease 1 (2026-12-03 evening): chunk-size sweep and LM-term cost split, build of 3ca860c.
L=/tmp/lease; cd "$(dirname "$0")/.."
mkdir -p $L/bin; xz -dc .gpu4/bin/bin-profile.xz > $L/bin/bin-profile; chmod +x $L/bin/bin-profile
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
cd $L; P=bin/bin-profile
run() { echo "=== $*" >> $L/profile.log; timeout 100 $P "$@" 2>&1 | grep -E "medians|back to back|memory:|panicked|rror|forward:|backward:" >> $L/profile.log; }
S="8192 4096 32000 --bf16 --identity"
run $S 20 --fusion --phases --memory
for c in 65536000 90112000 131072000; do run $S 20 --fusion --phases --memory --chunk $c; done
T="8192 4096 128256 --bf16 --identity"
run $T 20 --fusion --phases --memory
for r in 1024 1408 1664; do run $T 20 --fusion --phases --memory --chunk $((r*128256)); done
run 8192 4096 128256 --tf32 20 --fusion --phases --memory
run 8192 4096 128256 --tf32 20 --fusion --phases --memory --chunk $((1024*128256))
run 8192 4096 32000 --tf32 20 --fusion --phases --memory
run 8192 4096 32000 --tf32 20 --fusion --phases --memory --chunk $((2048*32000))
# LM terms, each alone, fusion and raw
run $S 20 --fusion --phases --logit-scale 0.5
run $S 20 --fusion --phases --softcap 30
run $S 20 --fusion --phases --z-loss 0.0001
run $S 20 --fusion --phases --z-loss 0.0001 --softcap 30
run $S 20 --phases
run $S 20 --phases --z-loss 0.0001 --softcap 30
run $S 20 --phases --logit-scale 0.5
run $S 20 --fusion --phases
mkdir -p $OUT/lease; cp $L/*.log $L/gpu.txt $OUT/lease/
cat $L/gpu.txt; cat $L/profile.log
