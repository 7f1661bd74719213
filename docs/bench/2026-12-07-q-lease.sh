#!/usr/bin/env bash
# Lease Q (2026-12-07, fourth session): the build of the commit that adds
# `head_scale_gradients` (the upstream gradient applied on the device, in place, no read by
# the host) beside the exit wait on CubeCL's server thread (lease P). `--host-waits K` runs
# the same build with K a sum of: 1 the exit wait on the calling thread, 2 the upstream
# gradient read on the host (K = 3 is the route before this session, K = 0 the new).
# In order, the most needed first: the fingerprint against the build of 3a03ed7 (lease O's),
# the A/B's first round, memcheck on the new kernel's test, the determinism and streamed
# suites, ours at issue 30's rows and the peers, the other suites, the long fuzz, `parity`,
# the A/B's second round (orders turned), traced steps at C = 1000.
# Started as `setsid bash docs/bench/2026-12-07-q-lease.sh &` from the repo root; each call
# packs /tmp/leaseQ (less its executables) into one archive under $OUT until `^all done`.
L=/tmp/leaseQ
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
unpack_fingerprints
sample_power
fingerprints
ab() {
  local k
  for k in $1; do
    run 8192 1024 1000 20 --fusion --phases --host-waits $k
    run 8192 1024 1000 --tf32 20 --fusion --phases --host-waits $k
    run 8192 1024 1000 --bf16 --identity 20 --fusion --phases --host-waits $k
  done
  for k in $2; do
    run 8192 4096 32000 --bf16 --identity 12 --fusion --phases --host-waits $k
    run 8192 4096 128256 --tf32 8 --fusion --phases --host-waits $k
  done
  echo "ab done $(date -u +%T)" >> "$S"
}
ab "3 0 1 2" "3 0"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$L/bin/test-streamed" cuda_scales_the_gradients_in_place > "$L/memcheck.log" 2>&1
echo "memcheck streamed cuda_scales_the_gradients_in_place rc=$? $(grep -E 'ERROR SUMMARY|^test result' "$L/memcheck.log" | tr '\n' ' ')" >> "$S"
suite determinism 200; suite streamed 200
issue30_rows 1
wait  # the wheels
issue30_peers
suite half_precision 300; suite logit_terms 200; suite edge_cases 300
long_fuzz
suite parity 300
echo "suites done $(date -u +%T)" >> "$S"
ab "2 1 0 3" "0 3"
run 8192 1024 1000 20 --fusion --timeline
run 8192 1024 1000 --tf32 20 --fusion --timeline
run 8192 1024 1000 --bf16 --identity 20 --fusion --timeline
stop_power
echo "all done $(date -u +%T)" >> "$S"
