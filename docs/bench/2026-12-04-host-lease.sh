#!/usr/bin/env bash
# Lease 2: the step's host instants (refined) at small and large C, fusion on and off.
L=/tmp/lease2; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
xz -dc .gpu8/bin/bin-profile.xz > $L/bin/bin-profile; chmod +x $L/bin/bin-profile
cd $L; P=bin/bin-profile
run() { echo "=== $*" >> $L/profile.log; timeout 120 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|timeline|panicked|rror" >> $L/profile.log; }
for row in "8192 1024 1000 --bf16 --identity" "8192 1024 1000" "8192 4096 32000 --bf16 --identity" "8192 4096 128256 --bf16 --identity"; do
  run $row 30 --fusion --timeline
  run $row 30 --timeline
done
mkdir -p $OUT/lease2; cp $L/*.log $OUT/lease2/ 2>/dev/null
cat $L/profile.log
