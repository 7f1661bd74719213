#!/usr/bin/env bash
# Lease M (2026-12-07, second session): issue 30's table again on the final code (the packs of
# `b79a43e`, whose `src/` is that of `72ec941`), then what lease L could not reach: the suites,
# the second round and the fingerprint of the default's bits. The order: ours, the peers, the
# traced timelines of the missed rows; memcheck, the fingerprint, the suites, the long fuzz;
# the second round. The same steps as `2026-12-07-issue30-lease.sh` (both call lease-lib.sh's
# helpers), reordered so that the correctness checks come before the second round.
# `$1` picks the parts: `table` (ours, the peers, the timelines), `checks` (memcheck, the
# fingerprint, the suites, the long fuzz), `all` (both, then the second round), `checks-first`
# (the checks, then the table): with devices scarce, the checks come first on an H100, the
# table first on the H200 the issue names.
# Started as `setsid bash docs/bench/2026-12-07-m-lease.sh PART &` from the repo root; each
# call packs /tmp/leaseM (less its executables) into one archive under $OUT until `^all done`.
PART=${1:-all}
L=/tmp/leaseM
cd "$(dirname "$0")/../.."
source docs/bench/lease-lib.sh  # the steps named below are its helpers
unpack_fingerprints
sample_power
table() {
  issue30_rows 1
  wait  # the wheels
  issue30_peers
  issue30_timelines
  stop_power
}
checks() {
  memcheck_rounded
  fingerprints
  suite half_precision 300; suite determinism 200; suite streamed 200; suite logit_terms 200
  suite parity 300; suite edge_cases 300
  echo "suites done $(date -u +%T)" >> "$S"
  long_fuzz
}
case "$PART" in
  table) table ;;
  checks) checks ;;
  checks-first) checks; table ;;
  all) table; checks; issue30_rows 2 ;;
esac
echo "all done $(date -u +%T)" >> "$S"
