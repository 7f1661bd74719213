#!/usr/bin/env bash
PART=$1
L=/tmp/lease
cd "$(dirname "$0")/.."
if [ "$PART" = a ]; then
rm -rf $L; mkdir -p $L/bin
for f in .gpu4/bin/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" > $L/bin/$n; chmod +x $L/bin/$n; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt
which nsys ncu compute-sanitizer >> $L/gpu.txt 2>&1; ls /usr/local/cuda/bin | grep -E "nsys|ncu|sanitizer" >> $L/gpu.txt
fi
cd $L; S=$L/summary
[ "$PART" = a ] && for t in streamed logit_terms edge_cases; do
  timeout 170 bin/test-$t > $L/test-$t.log 2>&1; echo "$t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
cat $S
P=bin/bin-profile
run() { FH_HOST_TIMES=1 timeout 100 "$@" 20 --fusion --phases > $L/p.out 2>&1; grep -E "medians|back to back|panicked|rror" $L/p.out >> $L/profile.log
    grep "HOSTTIMES fetch" $L/p.out | tail -40 | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END{print "fetch+wait median us", a[int(NR/2)+1]}' >> $L/profile.log
    grep "HOSTTIMES fetch" $L/p.out | tail -40 | awk '{print $6}' | sort -n | awk '{a[NR]=$1} END{print "run total median us", a[int(NR/2)+1]}' >> $L/profile.log
    grep "HOSTTIMES final" $L/p.out | tail -40 | awk '{print $4}' | sort -n | awk '{a[NR]=$1} END{print "final wait median us", a[int(NR/2)+1]}' >> $L/profile.log; }
if [ "$PART" = a ]; then ROWS=("8192 1024 1000 --tf32" "8192 1024 1000 --bf16 --identity" "8192 4096 32000 --bf16 --identity")
else ROWS=("8192 4096 32000 --tf32" "8192 4096 32000 --bf16 --identity --z-loss 0.0001 --softcap 30" "8192 4096 128256 --bf16 --identity"); fi
for row in "${ROWS[@]}"; do
  for v in old oldfetch new; do
    echo "=== $row $v" >> $L/profile.log
    case $v in
      old) run bin/bin-profile-old $row ;;
      oldfetch) FH_OLD_FETCH=1 run $P $row ;;
      new) run $P $row ;;
    esac
  done
done
echo "done $(date -u)" >> $S
mkdir -p $OUT/lease; cp $L/*.log $L/summary $L/gpu.txt $OUT/lease/
cat $L/gpu.txt $S; cat $L/profile.log
