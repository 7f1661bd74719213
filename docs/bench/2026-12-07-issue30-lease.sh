#!/usr/bin/env bash
# Lease L (2026-12-07): every row of issue 30's table from one lease, ours and the peers side by
# side, with the memory of every row (the small-classes path's since this build), the first
# step of each process, the traced timeline of each row that misses its target, then memcheck,
# the long fuzz, the suites, a second round of ours, and the fingerprint of the default's bits
# against the build before rounded logits (in that order, the most wanted first: the device
# budget left after failed starts may not reach the end).
# Started as `setsid bash docs/bench/2026-12-07-issue30-lease.sh &` from the repo root, each
# later call copying /tmp/leaseL to $OUT until `^all done`.
L=/tmp/leaseL
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
unpack_fingerprints
sample_power
issue30_rows 1
wait  # the wheels
issue30_peers
issue30_timelines
stop_power
memcheck_rounded
long_fuzz
suite half_precision 300; suite determinism 200; suite streamed 200; suite logit_terms 200
suite parity 300
echo "suites done $(date -u +%T)" >> "$S"
issue30_rows 2
suite edge_cases 300
fingerprints
echo "all done $(date -u +%T)" >> "$S"
