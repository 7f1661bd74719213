#!/usr/bin/env bash
# Run AM (session 8): the small-C steps phase by phase (host calls and GPU waits apart), fusion off and on.
cd "$(dirname "$0")/.."
bash .gpu/run list > /dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in "64 128 10" "8192 1024 10" "16384 1024 10" "65536 1024 10"; do
  for fusion in 0 1; do
    envs=(FUSED_HEAD_PROFILE_PHASES=1); [ $fusion = 1 ] && envs+=(FUSED_HEAD_PROFILE_FUSION=1)
    echo "== $shape fusion $fusion"; env "${envs[@]}" timeout 60 .gpu/bin/example-profile_head $shape 200 2>&1 | tail -4
  done
done
