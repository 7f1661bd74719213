#!/usr/bin/env bash
# Lease U (2026-12-07, sixth session): issue 30's "done when" lease, on an H200 only (an
# H100 ran the same final code in lease T the same evening). The final code (`445e83d`,
# packs `.gpu` and `.gpu8` of lease T): ours at issue 30's rows, then the peers at the four
# shapes (with torch.compile), every row's traced step, then the GPU checks, the most needed
# first, as far as the session's device time goes. On any other GPU it stops at once.
# Started as `setsid bash docs/bench/2026-12-07-u-lease.sh > /tmp/leaseU.out 2>&1 &` from the
# repo root; the call packs /tmp/leaseU (less its executables) under $OUT.
# Not run: after lease T, seven calls of the sixth session got no machine (four failed
# starts, two calls refused at once, and the last refused for too little device time left:
# 480 s of the 709 s left after lease T); the device time ended before an H200 came.
# Not run in the seventh session either (2026-12-07 to 08): of sixteen calls, twelve starts
# found no machine, three got an H100 (this script's check stopped them) and one was refused;
# then the workplace paused new loans with 432 s of device time left.
# Not run in the eighth session (2026-12-08): new loans were paused from its start (no call).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
[[ $gpu == *H200* ]] || { echo "not an H200: $gpu"; exit 3; }
L=/tmp/leaseU
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
wait  # the wheels, before any timing
unpack_fingerprints
sample_power
issue30_rows 1
issue30_peers
issue30_timelines
suite determinism 200
memcheck_rounded
suite streamed 200
long_fuzz
suite half_precision 300; suite logit_terms 200; suite edge_cases 300
suite parity 300
fingerprints
stop_power
echo "all done $(date -u +%T)" >> "$S"
