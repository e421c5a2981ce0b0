#!/usr/bin/env bash
# The accelerator measurement in one go (issue #7): env-only, PPO and CounterPlay agent-steps/s and
# peak device memory of the default (small) policy on one device, over batch sizes. Install-free:
# it runs from the checkout with PYTHONPATH and needs only jax, flax, optax, numpy (no TFDS: the
# procedural scenes are generated in memory). Budget: under 8 minutes on one H200.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh      # JSON lines in $OUT/scaling_*.json
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/cp_jax_gpu_check}"
mkdir -p "$OUT"
common=(--devices=1 --cache_dir= --repeats=3 --json)
python benchmarks/scaling.py "${common[@]}" --workloads=env --batch=512,2048,8192 --steps=90 | tee "$OUT/scaling_env.json"
python benchmarks/scaling.py "${common[@]}" --workloads=ppo --batch=256,1024,4096 --steps=45 | tee "$OUT/scaling_ppo.json"
python benchmarks/scaling.py "${common[@]}" --workloads=counterplay --batch=64,256 | tee "$OUT/scaling_counterplay.json"
