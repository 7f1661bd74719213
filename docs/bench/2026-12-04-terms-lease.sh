#!/usr/bin/env bash
# Lease 3: the LM terms' cost by operation (bf16 32000), and the small-C bf16 row.
L=/tmp/lease3; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
xz -dc .gpu8/bin/bin-profile.xz > $L/bin/bin-profile; chmod +x $L/bin/bin-profile
cd $L; P=bin/bin-profile
run() { echo "=== $*" >> $L/profile.log; timeout 120 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; }
B="8192 4096 32000 --bf16 --identity 20 --fusion --timeline"
run $B; run $B --softcap 30; run $B --z-loss 0.0001; run $B --softcap 30 --z-loss 0.0001; run $B --logit-scale 0.5; run $B
run 65536 1024 10 20 --fusion --phases; run 65536 1024 10 --bf16 20 --fusion --phases
mkdir -p $OUT/lease3; cp $L/*.log $OUT/lease3/ 2>/dev/null
cat $L/profile.log
