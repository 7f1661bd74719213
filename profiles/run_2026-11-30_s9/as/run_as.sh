#!/usr/bin/env bash
# Run AS (session 9): probe of a server-side wait at the end of each step (profile_head
# FUSED_HEAD_PROFILE_SERVER_WAIT=1) against plain and keep-awake, processes alternated.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in 1 2; do
  for shape in "65536 1024 10" "64 128 10"; do
    for v in plain wait awake; do
      envs=(FUSED_HEAD_PROFILE_PHASES=1)
      [ $v = wait ] && envs+=(FUSED_HEAD_PROFILE_SERVER_WAIT=1)
      [ $v = awake ] && envs+=(FUSED_HEAD_PROFILE_KEEP_AWAKE=1)
      echo "-- $shape $v r$round"; env "${envs[@]}" timeout 30 .gpu/bin/example-profile_head $shape 300 2>&1 | grep -E "medians \(ms\): forward host|back to back"
    done
  done
done
