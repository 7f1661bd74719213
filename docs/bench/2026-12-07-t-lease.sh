#!/usr/bin/env bash
# Lease T (2026-12-07, fifth session): the final code of the fourth session (`445e83d`) in
# full, on one machine, the most needed first: every GPU suite (`determinism`, `streamed`,
# `half_precision`, `logit_terms`, `edge_cases`, `parity`), compute-sanitizer memcheck on the
# rounded bf16 test, the issue's long fuzz on `Fusion<Cuda>`, the fingerprint against the
# build of 3a03ed7; then, the peers' wheels installed, ours at issue 30's rows and the peers
# at the four shapes (with torch.compile); traced steps at C = 1000 (the route the fourth
# session changed) and at bf16 32000, as far as the session's device time goes.
# Started as `setsid bash docs/bench/2026-12-07-t-lease.sh > /tmp/leaseT.out 2>&1 &` from the
# repo root; each call packs /tmp/leaseT (less its executables) into one archive under $OUT
# until `^all done`.
# Run in the sixth session (lease T, an H100; results under docs/bench/2026-12-07-t-h100*).
# In the fifth session eleven calls (H200 and H100) got no machine, costing 766 s
# of its 1800 s, and then the workplace stopped lending machines for the session. Its packs,
# built from `445e83d` (`.gpu`: the seven test executables; `.gpu8`: `profile`, `fingerprint`
# and 3a03ed7's `fingerprint-old`), take about 20 minutes of device time in this order.
L=/tmp/leaseT
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
unpack_fingerprints
sample_power
suite determinism 200; suite streamed 200
suite half_precision 300; suite logit_terms 200; suite edge_cases 300
suite parity 300
echo "suites done $(date -u +%T)" >> "$S"
memcheck_rounded
long_fuzz
fingerprints
wait  # the wheels, before any timing
issue30_rows 1
issue30_peers
run 8192 1024 1000 20 --fusion --timeline
run 8192 1024 1000 --tf32 20 --fusion --timeline
run 8192 1024 1000 --bf16 --identity 20 --fusion --timeline
run 8192 4096 32000 --bf16 --identity 20 --fusion --timeline
run 8192 4096 32000 --bf16 --identity 20 --fusion --timeline --rounded
stop_power
echo "all done $(date -u +%T)" >> "$S"
