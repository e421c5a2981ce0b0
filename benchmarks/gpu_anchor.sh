#!/usr/bin/env bash
# Issue #31 on one accelerator, in one call: the shipped anchor's real-roads stages (b73 + b80,
# assets/anchors/conditioned_small/README.md: from b41, eight layout kinds incl. highway, 448 scenes, log
# replay 0.6, time-to-collision cost 1) run as one stage of 1800 updates over three seeds (rec_s*), and the
# same recipe scaled up (512 scenes stepped at once, 8 minibatches, 200 updates: ~74 M agent-steps each)
# over three seeds (big_s*) — all at once, each its own process on the one GPU, each stopped at BUDGET_S
# wall seconds.
# A finished run is exported (launch.export_policy: lineage, curve, README); an unfinished one keeps its
# newest checkpoint and resumes exactly with the same command elsewhere (the CPU). Evaluation happens
# where the real-scene caches are (they need TFDS): python benchmarks/real_gap.py --policy=DIR ...
#
# Install-free: it runs from the checkout with PYTHONPATH and needs jax, flax, optax, orbax, absl, numpy,
# matplotlib and tqdm (on the device image) and ml_collections and tensorboardX (carried as wheels, e.g. in
# an ignored .whl/ installed with pip --no-index --target). The procedural scenes are built in memory
# (--config.scenes.cache_dir=, no TFDS). Tested end to end at toy sizes on the CPU (SMOKE=1, sessions 28 and 32);
# not yet run on a GPU (no device was lent when it was written).
#
#   OUT=/some/dir bash benchmarks/gpu_anchor.sh          # -> $OUT/NAME.tar.gz (each run), $OUT/summary.txt
#   OUT=/tmp/x SMOKE=1 BUDGET_S=500 bash benchmarks/gpu_anchor.sh   # toy sizes, to test it on a CPU
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.12}  # six processes share the GPU
OUT="${OUT:-/tmp/cp_jax_gpu_anchor}"
BUDGET_S="${BUDGET_S:-450}"
RUNS="$OUT/runs"
mkdir -p "$RUNS"
python -c "import jax; print(jax.__version__, jax.devices())"

kinds="--config.scenes.kinds=('four_way','t_junction','merge','roundabout','multi_lane','left_turn','narrow_passage','highway')"
recipe=(--config=experiments/anchor_small.py --config.init_from=assets/anchors/conditioned_small/lineage/b41 "$kinds"
        --config.scenes.train=448
        --config.ppo.log_frac=0.6 --config.shaping.ttc_gain=1 --config.scenes.cache_dir= --config.train.progress=False
        --config.train.keep=1)
updates=1800
scaled=(--config.ppo.num_envs=512 --config.ppo.num_minibatches=8 --config.train.total_updates=200
        --config.train.eval_every=100)
if [ "${SMOKE:-0}" = 1 ]; then  # the same runs at toy sizes
  updates=4
  recipe+=(--config.scenes.train=8 --config.scenes.eval=4 --config.ppo.num_envs=4 --config.train.ckpt_every=2
           --config.train.eval_every=2)
  scaled=(--config.ppo.num_envs=8 --config.ppo.num_minibatches=8 --config.scenes.train=8 --config.train.total_updates=4)
fi

declare -A flags=(
  [rec_s0]="--config.seed=0"
  [rec_s1]="--config.seed=1"
  [rec_s2]="--config.seed=2"
  [big_s0]="--config.seed=0 ${scaled[*]}"
  [big_s1]="--config.seed=1 ${scaled[*]}"
  [big_s2]="--config.seed=2 ${scaled[*]}"
)
t0=$SECONDS
for name in "${!flags[@]}"; do
  # shellcheck disable=SC2086  # the per-run flags are words
  timeout --signal=TERM "$BUDGET_S" python -m launch.train_anchor "${recipe[@]}" --config.train.total_updates=$updates \
    ${flags[$name]} --workdir="$RUNS/$name" >"$RUNS/$name.log" 2>&1 &
done
while [ -n "$(jobs -r)" ]; do  # one progress line a minute: each run's last logged update
  for _ in 1 2 3 4; do sleep 15; [ -z "$(jobs -r)" ] && break; done
  echo "[$((SECONDS - t0)) s] $(for n in $(printf '%s\n' "${!flags[@]}" | sort); do
    echo -n "$n:$(tail -n 1 "$RUNS/$n/metrics.jsonl" 2>/dev/null | cut -d, -f1 | tr -dc 0-9) "; done)"
done
wait
echo "trainings ended after $((SECONDS - t0)) s"

{
  echo "run | updates done | agent-steps | exported | command flags"
  for name in $(printf '%s\n' "${!flags[@]}" | sort); do
    last=$(grep -h '"step"' "$RUNS/$name/metrics.jsonl" 2>/dev/null | tail -n 1)
    step=$(python -c "import json,sys; r=json.loads(sys.argv[1] or '{}'); print(r.get('step','-'), r.get('agent_steps','-'))" "$last")
    exported=no
    if python -m launch.export_policy --workdir="$RUNS/$name" --out="$RUNS/$name/export" >>"$RUNS/$name.log" 2>&1; then
      exported=yes
      rm -rf "$RUNS/$name/checkpoints" "$RUNS/$name/tb"  # finished: the policy is what comes back
    fi
    echo "$name | $step | $exported | ${flags[$name]}"
  done
} | tee "$OUT/summary.txt"
for name in "${!flags[@]}"; do  # one archive a run (what comes back: at most 8 files of 16 MiB)
  tar -czf "$OUT/$name.tar.gz" -C "$RUNS" "$name" "$name.log"
done
rm -rf "$RUNS"
ls -la "$OUT"
echo "done after $((SECONDS - t0)) s"
