#!/usr/bin/env bash
# Issue #32's item 8 on one accelerator, in one call: the results command's Table I cells at one budget
# (default 5%) — each Table I method's 3 post-training runs and their benchmark cells on the procedural
# test set, plus the anchor's — as one `launch.results` process per method at once on the one GPU, each
# stopped at BUDGET_S wall seconds. Scenes are built in memory (--config.cache_dir=, no TFDS on the image);
# a cell's config does not include where scenes are cached, so these cells join the CPU's.
#
# What comes back: $OUT/cells.tar.gz.part-* (every finished cell, and an unfinished run's checkpoints, as
# OUT-relative paths of the results folder; split under the 16 MiB a file) and $OUT/summary.txt. Here:
#
#   cat FILES_AT/cells.tar.gz.part-* | tar xz --touch --skip-old-files -C results   # keeps the CPU's cells;
#   python -m launch.results --out=results --config.real.scenes=runs/real_test \    # --touch: newer than
#       --config.only="('bench/anchor',)"                                           # tables.md: re-tabled
#
# Install-free: it runs from the checkout with PYTHONPATH and needs jax, flax, optax, orbax, absl, numpy,
# matplotlib and tqdm (on the device image) and ml_collections and tensorboardX (carried as wheels in an
# ignored .whl/ and installed with pip --no-index --target before this script). Tested end to end at toy sizes
# on the CPU (SMOKE=1, session 34: 3 processes, 905 s beside other work; the archive merged into a results
# folder and tabled as above); not yet run on a GPU.
# Limit found in session 46: the device tool sends the checkout's tracked files, at most 64 MiB, and the
# committed cells (results/, ~108 MB since the 1% variant runs) are over it, so a call from this checkout is
# refused before it starts; running the remaining cells there would first need results/ out of the tracked tree.
#
#   OUT=/some/dir bash benchmarks/gpu_results.sh
#   OUT=/tmp/x SMOKE=1 BUDGET_S=900 bash benchmarks/gpu_results.sh      # toy sizes, to test it on a CPU
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.12}  # seven processes share the GPU
OUT="${OUT:-/tmp/cp_jax_gpu_results}"
BUDGET_S="${BUDGET_S:-480}"
BUDGET="${BUDGET:-0.05}"
WORK="${WORK:-/tmp/cp_jax_gpu_results_work}"  # not under $OUT: only 8 files come back
mkdir -p "$OUT" "$WORK"
python -c "import jax; print(jax.__version__, jax.devices())"

methods=$(python -c "from experiments.results import TABLE_I; print(' '.join(TABLE_I))")
tag=$(python -c "from cp_jax.jobs.results import budget_tag; print(budget_tag($BUDGET))")
common=(--config.budgets="($BUDGET,)" --config.variant_budgets="()" --config.cache_dir=)
if [ "${SMOKE:-0}" = 1 ]; then  # the same cells at toy sizes (another config: they do not join real cells)
  common=(--config.budgets="(0.0002,)" --config.variant_budgets="()" --config.cache_dir= --config.seeds="(0,)"
          --config.bench.pairs=3 --config.bench.procedural_scenes=2 --config.bench.seeds=1
          --config.bench.regimes="('idm','normal')" --config.bench.splits="('interactive',)" --config.n_boot=50)
  BUDGET=0.0002
  tag=$(python -c "from cp_jax.jobs.results import budget_tag; print(budget_tag($BUDGET))")
  methods="counterplay ppo_continue"
fi

declare -A only=([anchor]="('bench/anchor',)")
for m in $methods; do only[$m]="('runs/$tag/${m}_s','bench/$tag/${m}_s')"; done
t0=$SECONDS
for name in "${!only[@]}"; do
  timeout --signal=TERM --kill-after=20 "$BUDGET_S" python -m launch.results "${common[@]}" --config.only="${only[$name]}" \
    --out="$WORK/$name" >"$WORK/$name.log" 2>&1 &
done
while [ -n "$(jobs -r)" ]; do  # one line a minute: each process's last cell begun
  for _ in 1 2 3 4; do sleep 15; [ -z "$(jobs -r)" ] && break; done
  echo "[$((SECONDS - t0)) s] $(for n in $(printf '%s\n' "${!only[@]}" | sort); do
    echo -n "$n:$(grep -o 'cell [0-9]*/[0-9]*' "$WORK/$n.log" 2>/dev/null | tail -n 1 | cut -d' ' -f2) "; done)"
done
wait
echo "cells ended after $((SECONDS - t0)) s"

merged="$WORK/merged"
rm -rf "$merged" && mkdir -p "$merged"
for name in "${!only[@]}"; do
  for part in runs bench; do
    [ -d "$WORK/$name/$part" ] && cp -r "$WORK/$name/$part" "$merged/"
  done
done
find "$merged" -maxdepth 3 -name '*.partial' -prune -exec rm -rf {} +  # a benchmark cell cut short
for run in "$merged"/runs/*/*/; do  # a finished run: its policy is what comes back
  [ -f "$run/post_train.json" ] && rm -rf "$run/checkpoints" "$run/tb"
done
{
  echo "budget $BUDGET ($tag), ${BUDGET_S} s per process, $((SECONDS - t0)) s in all"
  echo "finished post-training runs: $(find "$merged/runs" -name post_train.json 2>/dev/null | wc -l)"
  echo "finished benchmark cells: $(find "$merged/bench" -name cell.json 2>/dev/null | wc -l)"
  for name in $(printf '%s\n' "${!only[@]}" | sort); do echo "--- $name"; tail -n 3 "$WORK/$name.log"; done
} | tee "$OUT/summary.txt"
tar czf - -C "$merged" . | split -b 15M - "$OUT/cells.tar.gz.part-"
ls -la "$OUT"
