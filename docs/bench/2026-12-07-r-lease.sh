#!/usr/bin/env bash
# Lease R (2026-12-07, fourth session): lease Q's A/B at C = 1000 again, alone on the machine
# (in Q the first round ran beside the peers' wheels installing, and the rounds' spread was
# larger than the effects). The build of lease Q (`.gpu8`'s profile); `--host-waits K`: 3 is
# the route before this session (exit wait on the calling thread, upstream gradient read on
# the host), 0 the new, 1 and 2 each change alone. Three rounds, 50 steps a run.
# Run as `OUT=DIR bash docs/bench/2026-12-07-r-lease.sh` from the repo root.
mkdir -p /tmp/leaseR && xz -dc .gpu8/bin/bin-profile.xz > /tmp/leaseR/profile && chmod +x /tmp/leaseR/profile
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
date -u >> "$OUT/gpu.txt"; cat .gpu8/rev >> "$OUT/gpu.txt"
for round in 1 2 3; do
  for k in 3 0 2 1; do
    for p in "" "--tf32" "--bf16 --identity"; do
      echo "=== $(date +%H:%M:%S.%N) 8192 1024 1000 $p 50 --fusion --phases --host-waits $k" >> "$OUT/profile.log"
      # shellcheck disable=SC2086  # $p is a list of flags
      timeout 60 /tmp/leaseR/profile 8192 1024 1000 $p 50 --fusion --phases --host-waits $k 2>&1 \
        | grep -E "medians|back to back|step\(s\)|^first step|rror|panicked" >> "$OUT/profile.log"
      echo "--- $(date +%H:%M:%S.%N)" >> "$OUT/profile.log"
    done
  done
done
echo "all done $(date -u +%T)" >> "$OUT/gpu.txt"
