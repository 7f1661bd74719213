# Helpers of the lease scripts under docs/bench/ (sourced, from the repo root, with $L set to
# the lease's folder under /tmp): the executables unpacked into $L/bin, the peers' wheels
# installed into /tmp/site in the background, the GPU named, and
#   run ARGS...        one `profile` process, its summary lines appended to $L/profile.log;
#   suite NAME SECS    one test executable, its log $L/test-NAME.log, a line in $L/summary.
rm -rf "$L"; mkdir -p "$L/bin"
for f in .gpu/bin/*.xz .gpu8/bin/bin-profile.xz; do
  [ -e "$f" ] || continue
  n=$(basename "${f%.xz}"); xz -dc "$f" > "$L/bin/$n"; chmod +x "$L/bin/$n"
done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/*.whl > "$L/pip.log" 2>&1 &
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$L/gpu.txt"
date -u >> "$L/gpu.txt"; cat .gpu8/rev >> "$L/gpu.txt" 2>/dev/null
S=$L/summary; P=$L/bin/bin-profile
run() {
  echo "=== $(date +%H:%M:%S.%N) $*" >> "$L/profile.log"
  timeout 90 "$P" "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|^first step|timeline|memory|panicked|rror" >> "$L/profile.log"
  echo "--- $(date +%H:%M:%S.%N)" >> "$L/profile.log"
}
suite() {
  local s0; s0=$(date +%s)
  timeout "$2" "$L/bin/test-$1" > "$L/test-$1.log" 2>&1; local rc=$?
  echo "$1 rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' "$L/test-$1.log" | tail -1)" >> "$S"
}
peers() {
  echo "=== $(date +%H:%M:%S.%N) peers $*" >> "$L/peers.log"
  PYTHONPATH=/tmp/site timeout 420 python3 .peers/peers_bench.py "$@" --csv "$L/peers.csv" >> "$L/peers.log" 2>&1
  echo "--- $(date +%H:%M:%S.%N) rc=$?" >> "$L/peers.log"
}

# Issue 30's leases (2026-12-07, L and M) share these steps:
#   unpack_fingerprints  `.gpu8`'s fingerprint builds into $L/bin;
#   sample_power         docs/bench/power.py's samples into $L/smi.csv until `stop_power`;
#   issue30_rows ROUND   ours at issue 30's rows (f32 and TF32 with ReLU, bf16 with the
#                        identity at C >= 1000 and with ReLU at C = 10), the modes of bf16 at
#                        the LM shapes, the small-C pairs of item 6; round 1 adds lean bf16
#                        alone and f32 at 32000;
#   issue30_peers        the peers at the four shapes, with torch.compile;
#   issue30_timelines    one traced run of each row that misses its target;
#   memcheck_rounded     memcheck on the rounded bf16 test;
#   long_fuzz            the issue's long fuzz on `Fusion<Cuda>`;
#   fingerprints         the default's bits, this build against the build of fb71f28.
unpack_fingerprints() {
  local f n
  for f in .gpu8/bin/bin-fingerprint*.xz; do
    n=$(basename "${f%.xz}"); xz -dc "$f" > "$L/bin/$n"; chmod +x "$L/bin/$n"
  done
}
sample_power() {
  setsid -f nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 50 > "$L/smi.csv" 2>&1 < /dev/null
}
stop_power() { pkill -f "nvidia-smi --query-gpu=timestamp"; }
issue30_rows() {
  local c
  run 8192 1024 1000 20 --fusion --phases --memory
  run 8192 1024 1000 --tf32 20 --fusion --phases --memory
  run 8192 1024 1000 --bf16 --identity 20 --fusion --phases --memory
  run 65536 1024 10 20 --fusion --phases --memory
  run 65536 1024 10 --bf16 20 --fusion --phases --memory
  run 65536 1024 10 --bf16 --identity 20 --fusion --phases --memory
  run 8192 1024 10 20 --fusion --phases --memory
  run 8192 1024 10 --bf16 20 --fusion --phases --memory
  for c in 32000 128256; do
    run 8192 4096 $c --tf32 20 --fusion --phases --memory
    run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory
    run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory --rounded
    run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory --lean --rounded
    [ "$1" = 1 ] && run 8192 4096 $c --bf16 --identity 20 --fusion --phases --memory --lean
  done
  [ "$1" = 1 ] && run 8192 4096 32000 20 --fusion --phases --memory
  echo "ours round $1 done $(date -u +%T)" >> "$S"
}
issue30_peers() {
  peers --shape 8192,1024,1000 --shape 65536,1024,10 --shape 8192,4096,32000 --shape 8192,4096,128256
  echo "peers done $(date -u +%T)" >> "$S"
}
issue30_timelines() {
  local c
  run 8192 1024 1000 20 --fusion --timeline
  run 8192 1024 1000 --tf32 20 --fusion --timeline
  run 8192 1024 1000 --bf16 --identity 20 --fusion --timeline
  for c in 32000 128256; do
    run 8192 4096 $c --tf32 20 --fusion --timeline
    run 8192 4096 $c --bf16 --identity 20 --fusion --timeline
    run 8192 4096 $c --bf16 --identity 20 --fusion --timeline --rounded
  done
  run 8192 4096 32000 5 --fusion --timeline
  echo "timelines done $(date -u +%T)" >> "$S"
}
memcheck_rounded() {
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$L/bin/test-half_precision" bf16_rounded > "$L/memcheck.log" 2>&1
  echo "memcheck half_precision bf16_rounded rc=$? $(grep -E 'ERROR SUMMARY|^test result' "$L/memcheck.log" | tr '\n' ' ')" >> "$S"
}
long_fuzz() {
  local s0; s0=$(date +%s)
  FUSED_HEAD_FUZZ_CASES=20000 FUSED_HEAD_FUZZ_SECONDS=150 FUSED_HEAD_FUZZ_LARGE=1 timeout 240 "$L/bin/test-fuzz" cuda_fusion --nocapture --test-threads=1 > "$L/fuzz.log" 2>&1
  echo "fuzz rc=$? $(($(date +%s)-s0))s $(grep -E 'cases|^test result' "$L/fuzz.log" | tail -2 | tr '\n' ' ')" >> "$S"
}
fingerprints() {
  local f
  for f in fingerprint fingerprint-old; do
    timeout 120 "$L/bin/bin-$f" > "$L/$f.txt" 2> "$L/$f.err"
    echo "$f rc=$? $(wc -l < "$L/$f.txt") lines" >> "$S"
  done
  echo "fingerprint diff: $(diff "$L/fingerprint-old.txt" "$L/fingerprint.txt" | grep -c '^[<>]') lines differ" >> "$S"
}
