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
