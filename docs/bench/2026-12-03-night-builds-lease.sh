#!/usr/bin/env bash
# Lease 2: the build before (0d9c4b8), the vectorised row kernel alone, and the whole-batch dZ mode, same lease.
L=/tmp/lease; rm -rf $L; mkdir -p $L/bin
cd "$(dirname "$0")/.."
for f in .gpu7/bin/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu7/rev >> $L/gpu.txt
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null); echo "nsys: $NSYS" >> $L/gpu.txt
cd $L; S=$L/summary
run() { echo "=== $*" >> $L/profile.log; timeout 100 "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|memory:|panicked|rror" >> $L/profile.log; }
for row in "8192 4096 32000 --bf16 --identity" "8192 4096 128256 --bf16 --identity" "8192 4096 32000 --bf16 --identity --z-loss 0.0001 --softcap 30" "8192 1024 1000 --bf16 --identity"; do
  for rep in 1 2; do
    for v in old vec ""; do run bin/bin-profile${v:+-$v} $row 20 --fusion --phases; done
  done
done
for v in old ""; do run bin/bin-profile${v:+-$v} 8192 4096 128256 --tf32 20 --fusion --phases; done
for row in "8192 4096 32000 --bf16 --identity" "8192 4096 128256 --bf16 --identity"; do run bin/bin-profile $row 3 --fusion --memory; done
echo "profile done $(date -u)" >> $S
if [ -n "$NSYS" ]; then
  timeout 150 $NSYS profile -o $L/new32k --force-overwrite true bin/bin-profile 8192 4096 32000 --bf16 --identity 5 --fusion > $L/nsys-run.log 2>&1
  timeout 120 $NSYS stats --report cuda_gpu_kern_sum --format csv $L/new32k.nsys-rep > $L/nsys-32k.csv 2>&1
  echo "nsys rc=$?" >> $S
fi
mkdir -p $OUT/lease; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/lease/ 2>/dev/null
cat $L/gpu.txt $S; grep -E "===|medians|memory|rror|panick" $L/profile.log
head -30 $L/nsys-32k.csv 2>/dev/null | cut -c1-250
