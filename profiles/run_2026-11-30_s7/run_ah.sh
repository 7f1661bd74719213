#!/usr/bin/env bash
# Run AH (session 7): the TF32 memory figure at (8192, 4096, 32000) (1406.7 MiB in run AF), per contender, fresh processes.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
for w in 4 5 2; do
  echo "=== --memory $w 8192 4096 32000"; timeout 60 bash .gpu/run bench-head --bench --memory $w 8192 4096 32000 2>&1 | tail -5
done
echo "=== --memory 4 8192 1024 8000"; timeout 60 bash .gpu/run bench-head --bench --memory 4 8192 1024 8000 2>&1 | tail -3
