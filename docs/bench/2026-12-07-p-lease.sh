#!/usr/bin/env bash
# Lease P (2026-12-07, fourth session; the build of the commit that adds this script): where the host's time at C = 1000 goes after the
# streamed path's stream. `profile --host-waits K` (burn_fused_head::testing::with_host_waits)
# runs the same build with K a sum of: 1 the exit wait on the calling thread (the route
# before this session; without it the wait runs on CubeCL's server thread), 2 no read of the
# upstream gradient (a measure only), 4 the gradients always scaled by stock ops (no read).
# Two rounds of every K at issue 30's C = 1000 rows and bf16 at 32000, the orders turned;
# then traced steps; the fingerprint of this build against the build of 3a03ed7 (lease O's).
# Started as `setsid bash docs/bench/2026-12-07-p-lease.sh &` from the repo root; each call
# packs /tmp/leaseP (less its executables) into one archive under $OUT until `^all done`.
L=/tmp/leaseP
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
sample_power
fingerprints
for order in "1 0 3 2 5 4" "4 5 2 3 0 1"; do
  for k in $order; do
    run 8192 1024 1000 20 --fusion --phases --host-waits $k
    run 8192 1024 1000 --tf32 20 --fusion --phases --host-waits $k
    run 8192 1024 1000 --bf16 --identity 20 --fusion --phases --host-waits $k
    run 8192 4096 32000 --bf16 --identity 12 --fusion --phases --host-waits $k
  done
  echo "round done $(date -u +%T)" >> "$S"
done
for k in 1 0 2; do
  run 8192 1024 1000 --tf32 20 --fusion --timeline --host-waits $k
  run 8192 1024 1000 --bf16 --identity 20 --fusion --timeline --host-waits $k
  run 8192 1024 1000 --tf32 20 --phases --host-waits $k
done
for k in 1 0; do
  run 65536 1024 10 --bf16 20 --fusion --phases --host-waits $k
  run 8192 4096 32000 --tf32 12 --fusion --phases --host-waits $k
done
stop_power
echo "all done $(date -u +%T)" >> "$S"
