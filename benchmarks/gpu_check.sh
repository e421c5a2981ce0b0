#!/usr/bin/env bash
# The accelerator measurement in one go (issue #7): env-only, PPO and CounterPlay agent-steps/s and
# peak device memory of the default (small) policy on one device, over batch sizes, then where a PPO
# update's time goes (simulation / network forward / learning). Install-free: it runs from the
# checkout with PYTHONPATH and needs only jax, flax, optax, numpy (no TFDS: the procedural scenes
# are generated in memory). Budget: under 8 minutes on one H200. A part that fails is reported and
# the next one still runs; every part's output is kept in $OUT.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh      # JSON lines in $OUT/*.json, logs in $OUT/*.log
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/cp_jax_gpu_check}"
mkdir -p "$OUT"
python -c "import jax; print(jax.__version__, jax.devices())"
common=(--devices=1 --cache_dir= --repeats=3 --json)
part() {  # part NAME COMMAND...: stdout to $OUT/NAME.json, stderr to $OUT/NAME.log
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$OUT/$name.json" 2>"$OUT/$name.log" || echo "gpu_check: $name FAILED (see $name.log)"
  echo "gpu_check: $name took $((SECONDS - t0)) s"; tail -n 1 "$OUT/$name.json" | cut -c1-400
}
part scaling_env python benchmarks/scaling.py "${common[@]}" --workloads=env --batch=1024,8192,32768 --steps=90
part scaling_ppo python benchmarks/scaling.py "${common[@]}" --workloads=ppo --batch=512,2048,8192 --steps=45
part scaling_counterplay python benchmarks/scaling.py "${common[@]}" --workloads=counterplay --batch=64,256,1024
part ppo_profile python benchmarks/ppo_throughput.py --cache_dir= --json --envs=2048,8192 --updates=3 --capacity=0.3
