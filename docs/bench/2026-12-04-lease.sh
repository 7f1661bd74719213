#!/usr/bin/env bash
# Table lease: issue 30's rows, ours (this build) and the peers, one lease; clocks and power sampled.
# Call 1: `b.sh 1` (ours, then the peers at the two small shapes); call 2: `b.sh 2` (the peers at large C).
L=/tmp/leaseB; cd "$(dirname "$0")/.."
if [ "$1" = 2 ]; then
  for shape in 8192,4096,32000 8192,4096,128256; do
    echo "=== $(date +%H:%M:%S.%N) peers $shape" >> $L/peers.log
    PYTHONPATH=/tmp/site timeout 250 python3 .peers/peers_bench.py --shape $shape --csv $L/peers.csv >> $L/peers.log 2>&1
    echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
  done
  echo "peers done $(date -u)" >> $L/summary
  pkill -f "nvidia-smi --query-gpu=timestamp"
  mkdir -p $OUT/leaseB; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/leaseB/ 2>/dev/null
  cat $L/summary; grep -E "^(torch|liger|cce|Liger|CCE)|ms" $L/peers.log | tail -40
  exit 0
fi
rm -rf $L; mkdir -p $L/bin
xz -dc .gpu8/bin/bin-profile.xz > $L/bin/bin-profile; chmod +x $L/bin/bin-profile
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > $L/pip.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt; date -u >> $L/gpu.txt; cat .gpu8/rev >> $L/gpu.txt
setsid nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 50 > $L/smi.csv 2>&1 < /dev/null &
R=$PWD; cd $L; S=$L/summary; P=bin/bin-profile
run() { echo "=== $(date +%H:%M:%S.%N) $*" >> $L/profile.log; timeout 100 $P "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|memory:|panicked|rror" >> $L/profile.log; echo "--- $(date +%H:%M:%S.%N)" >> $L/profile.log; }
for row in "8192 1024 1000" "8192 1024 1000 --tf32" "8192 1024 1000 --bf16 --identity" \
           "8192 4096 32000 --tf32" "8192 4096 32000 --bf16 --identity" \
           "8192 4096 128256 --tf32" "8192 4096 128256 --bf16 --identity" "8192 4096 32000" \
           "65536 1024 10" "65536 1024 10 --bf16"; do
  run $row 20 --fusion --phases --memory
done
echo "ours done $(date -u)" >> $S
cd $R
for shape in 8192,1024,1000 65536,1024,10; do
  echo "=== $(date +%H:%M:%S.%N) peers $shape" >> $L/peers.log
  PYTHONPATH=/tmp/site timeout 170 python3 .peers/peers_bench.py --shape $shape --csv $L/peers.csv >> $L/peers.log 2>&1
  echo "--- $(date +%H:%M:%S.%N) rc=$?" >> $L/peers.log
done
echo "peers small done $(date -u)" >> $S
mkdir -p $OUT/leaseB; cp $L/*.log $L/*.csv $L/summary $L/gpu.txt $OUT/leaseB/ 2>/dev/null
cat $S; grep -E "===|medians|memory" $L/profile.log; tail -5 $L/peers.log
