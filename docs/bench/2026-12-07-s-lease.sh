#!/usr/bin/env bash
# Lease S (2026-12-07, fourth session): the final code (`c1e31d8`: the device's scaling of g
# reverted, the exit wait on CubeCL's server thread for B I C <= 2^36) in the session's last
# 241 s of device time: the fingerprint against the build of 3a03ed7 (lease O's), `streamed`,
# bf16 at (8192, 1024, 1000) with the path's rule against the wait on the calling thread
# (`--host-waits 1`), bf16 at 32000 (the rule's calling thread), then `determinism`.
# Run as `OUT=DIR bash docs/bench/2026-12-07-s-lease.sh` from the repo root; logs into $OUT.
L=/tmp/leaseS; rm -rf "$L"; mkdir -p "$L"
for f in .gpu/bin/*.xz .gpu8/bin/*.xz; do
  n=$(basename "${f%.xz}"); xz -dc "$f" > "$L/$n"; chmod +x "$L/$n"
done
S=$OUT/summary
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
date -u >> "$OUT/gpu.txt"; cat .gpu8/rev >> "$OUT/gpu.txt"
for f in fingerprint fingerprint-old; do
  timeout 60 "$L/bin-$f" > "$OUT/$f.txt" 2> /dev/null
  echo "$f rc=$? $(wc -l < "$OUT/$f.txt") lines" >> "$S"
done
echo "fingerprint diff: $(diff "$OUT/fingerprint-old.txt" "$OUT/fingerprint.txt" | grep -c '^[<>]') lines differ" >> "$S"
suite() {
  local s0; s0=$(date +%s)
  timeout "$2" "$L/test-$1" > "$OUT/test-$1.log" 2>&1; local rc=$?
  echo "$1 rc=$rc $(($(date +%s)-s0))s $(grep -E '^test result' "$OUT/test-$1.log" | tail -1)" >> "$S"
}
run() {
  echo "=== $(date +%H:%M:%S.%N) $*" >> "$OUT/profile.log"
  timeout 30 "$L/bin-profile" "$@" 2>&1 | grep -E "medians|back to back|step\(s\)|^first step|rror|panicked" >> "$OUT/profile.log"
  echo "--- $(date +%H:%M:%S.%N)" >> "$OUT/profile.log"
}
suite streamed 60
for k in 1 0 1 0; do run 8192 1024 1000 --bf16 --identity 20 --fusion --phases --host-waits $k; done
run 8192 4096 32000 --bf16 --identity 12 --fusion --phases
suite determinism 80
echo "all done $(date -u +%T)" >> "$S"
