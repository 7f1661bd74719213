#!/usr/bin/env bash
# Run AN (session 8): change 14 (the op hands its queued launches to CubeCL's server thread) against
# the same build with the flush switched off by an experiment variable, processes alternated.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in "64 128 10" "65536 1024 10"; do
  for fusion in 0 1; do
    for rep in 1 2; do
      for flush in on off; do
        envs=(FUSED_HEAD_PROFILE_PHASES=1); [ $fusion = 1 ] && envs+=(FUSED_HEAD_PROFILE_FUSION=1)
        [ $flush = off ] && envs+=(FUSED_HEAD_EXPERIMENT_NO_FLUSH=1)
        echo "== $shape fusion $fusion flush $flush"; env "${envs[@]}" timeout 60 .gpu/bin/example-profile_head $shape 200 2>&1 | grep -E "medians|back to back"
      done
    done
  done
done
for flush in on off on off; do
  envs=(); [ $flush = off ] && envs=(FUSED_HEAD_EXPERIMENT_NO_FLUSH=1)
  echo "== bench flush $flush"; env "${envs[@]}" timeout 100 bash .gpu/run bench-head --bench --ours-only --shape 64,128,10 --shape 65536,1024,10 --shape 8192,1024,1000 2>&1 | grep -E "^\| [0-9]"
done
