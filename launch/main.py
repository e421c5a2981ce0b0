"""The main job on the embedded default: the shipped anchor, CounterPlay vs PPO-Continue at the same
small budget, and the benchmark on procedural splits (no download).

    python -m launch.main --out=runs/main [--config=experiments/main.py --config.budget_frac=0.02]

Steps: (1) validate everything and read the anchor; (2) `launch.post_train` with
experiments/counterplay.py into OUT/counterplay, then experiments/ppo_continue.py into
OUT/ppo_continue (each resumes if re-run); (3) the benchmark (launch.evaluate) with the policies
named anchor, counterplay and ppo_continue: OUT/summary.json (the benchmark's format), tables.md
(Tables I, III, IV), episodes.jsonl, and figures of the anchor's failures that CounterPlay repairs
(anchor left, counterplay right).
"""

from __future__ import annotations

import os
import time

from absl import app, flags
from ml_collections import config_flags

flags.DEFINE_string("out", "runs/main", "output directory")
config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "main.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS
EXPECTED_MINUTES = 15  # b41 (budget 196 K): 27 min with the test suite sharing the 2-core CPU; b24 (98 K) took 5-8 min alone


def _post_configs(config):
    """The two post-training configs with the main job's anchor, budget and seed applied."""
    out = {}
    for name in ("counterplay", "ppo_continue"):
        c = config[name]
        c.anchor, c.budget_frac, c.budget_steps, c.seed = config.anchor, config.budget_frac, 0, config.seed
        out[name] = c
    return out


def main(_):
    from cp_jax.bench import episodes
    from cp_jax.bench.harness import run_benchmark
    from cp_jax.counterplay import trainer
    from cp_jax.io.run_info import write_run_info
    from cp_jax.policy import saved

    config = FLAGS.config
    posts = _post_configs(config)
    setups = {name: trainer.resolve(c) for name, c in posts.items()}  # validates both before any work
    b = config.bench
    regimes = list(episodes.REGIMES) if list(b.regimes) == ["all"] else list(b.regimes)
    unknown = set(regimes) - set(episodes.REGIMES)
    if unknown:
        raise ValueError(f"config.bench.regimes: unknown {sorted(unknown)}; known: all, {', '.join(episodes.REGIMES)}")
    for flag in ("ppo_policy", "bc_policy"):
        if not os.path.isdir(b[flag]):
            raise ValueError(f"config.bench.{flag}: {b[flag]!r} is not a policy folder")
    write_run_info(FLAGS.out, config)
    budget = setups["counterplay"].budget
    print(f"main job: anchor {config.anchor}; CounterPlay and PPO-Continue, {budget:,.0f} agent-steps each "
          f"({100 * config.budget_frac:g}% of the anchor's training); then {len(regimes)} regimes x "
          f"{len(b.splits)} splits x {b.pairs} pairs x 3 policies. Expect about {EXPECTED_MINUTES} minutes on a "
          f"2-core CPU (less on an accelerator). Output: {FLAGS.out}", flush=True)

    t0 = time.time()
    for name, c in posts.items():
        print(f"[{time.time() - t0:5.0f}s] post-training: {name}", flush=True)
        trainer.post_train(c, os.path.join(FLAGS.out, name))

    print(f"[{time.time() - t0:5.0f}s] benchmark", flush=True)
    egos = [episodes.from_saved("anchor", saved.load(config.anchor))]
    egos += [episodes.from_saved(name, saved.load(os.path.join(FLAGS.out, name, "policy"))) for name in posts]
    traffic = {"anchor": episodes.from_saved("anchor", saved.load(config.anchor)),
               "ppo": episodes.from_saved("ppo", saved.load(b.ppo_policy)),
               "smart_bc": episodes.from_saved("smart_bc", saved.load(b.bc_policy))}
    scenes = dict(kind="procedural", num_scenes=b.procedural_scenes, pairs=b.pairs, seed=b.procedural_seed,
                  agents=config.counterplay.scenes.agents, cache_dir=config.counterplay.scenes.cache_dir)
    repaired = lambda clean: clean.get("anchor") is False and clean.get("counterplay") is True  # noqa: E731
    run_benchmark(egos, traffic, regimes, list(b.splits), list(b.ego_styles), b.seeds, FLAGS.out, scenes,
                  figures=b.figures, progress=False, figure_filter=repaired)
    print(f"done in {time.time() - t0:.0f}s -> {FLAGS.out}/summary.json, tables.md, fig_*.png")


if __name__ == "__main__":
    app.run(main)
