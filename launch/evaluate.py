"""The benchmark: policies drive one ego per (scene, ego) pair under eight traffic regimes.

    python -m launch.evaluate --policy=assets/anchors/conditioned_small --scenes=procedural \
        --splits=interactive,random --regimes=all --ego_styles=normal --seeds=3 --out=runs/bench
    python -m launch.evaluate --policy=anchor=assets/anchors/conditioned_small --policy=idm ... --figures=4

--policy: a saved policy folder, `name=folder`, or a built-in driver (expert = log replay, idm,
const_vel); the first is the reference of Table III. --scenes: `procedural`, the validation set
(--procedural_scenes scenes from seed 300000, both splits of --pairs pairs each), or a converted scene
cache (launch.build_scenes) with split manifests in --manifests (launch.make_splits). The procedural test
set is read only by launch.results (docs/decisions.md, "Data roles").

Writes into --out: episodes.jsonl (one line per episode: policy, split, regime, ego_style, seed,
scene_id, ego and its metrics, so two policies can be compared pair by pair), summary.json and
summary.csv (one record per policy x split x regime x ego style; cp_jax.bench.report), tables.md
(Tables I, III, IV, the outcome shares per regime, and each policy's paired difference from the
first), timing.json, with
--figures=N, N Fig.-3-style PNGs (first two policies side by side on pairs where their outcomes
differ), and report.html (one self-contained page: the tables, intervals, per-regime charts and the
first two policies' gallery; cp_jax/bench/html_report.py). Definitions: cp_jax/bench/*.py.
"""

from __future__ import annotations

import os

from absl import app, flags

from launch import cli

flags.DEFINE_multi_string("policy", None, "policy folder, name=folder, or a built-in (expert, idm, const_vel)")
flags.DEFINE_string("scenes", "procedural", "'procedural' (the validation set) or a converted scene cache directory")
flags.DEFINE_string("manifests", "", "directory with interactive.csv / random.csv (cache scenes; default "
                    "SCENES/splits)")
flags.DEFINE_list("splits", ["interactive", "random"], "splits to run")
flags.DEFINE_list("regimes", ["all"], "traffic regimes, or 'all'")
flags.DEFINE_list("ego_styles", ["normal"], "the ego's style(s)")
flags.DEFINE_integer("seeds", 1, "seeds 0 .. seeds-1 (they vary the sampled actions of policy traffic)", lower_bound=1)
flags.DEFINE_string("out", None, "output directory")
flags.DEFINE_integer("figures", 0, "Fig.-3-style PNGs to write", lower_bound=0)
flags.DEFINE_integer("pairs", 200, "pairs per procedural split", lower_bound=1)
flags.DEFINE_integer("procedural_scenes", 60, "procedural scenes the splits are drawn from", lower_bound=1)
flags.DEFINE_integer("agents", 12, "agents placed per procedural scene", lower_bound=1)
flags.DEFINE_string("anchor_policy", "assets/anchors/conditioned_small", "conditioned anchor (style regimes)")
flags.DEFINE_string("ppo_policy", "assets/anchors/ppo_small", "non-conditioned PPO policy (ppo regime)")
flags.DEFINE_string("bc_policy", "assets/anchors/smart_bc", "behaviour-cloned policy (smart_bc regime)")
flags.DEFINE_string("cache_dir", "~/.cache/cp_jax/scenes", "procedural scene cache")
flags.DEFINE_bool("progress", True, "progress bar")
flags.DEFINE_bool("overwrite", False, "replace the results an earlier evaluation left in --out")
FLAGS = flags.FLAGS
BENCH_FLAGS = ("splits", "regimes", "ego_styles", "seeds", "scenes", "manifests", "pairs", "procedural_scenes",
               "agents", "cache_dir", "figures", "anchor_policy", "ppo_policy", "bc_policy")


def validate():
    """Every flag checked before any work; returns (egos, BenchConfig)."""
    from cp_jax.bench import config as bench_config
    from cp_jax.bench import episodes, suite

    if not FLAGS.policy:
        raise app.UsageError("--policy: give at least one")
    if not FLAGS.out:
        raise app.UsageError("--out: required")
    from cp_jax.jobs.benchmark import OUTPUTS

    held = [name for name in OUTPUTS if os.path.exists(os.path.join(FLAGS.out, name))]
    if held and not FLAGS.overwrite:
        raise app.UsageError(f"--out={FLAGS.out} holds an earlier evaluation ({', '.join(held)}); pass --overwrite "
                             "to replace it (it stays until the new one is complete), or choose another --out")
    try:
        suite.refuse_test_set(FLAGS.scenes, "--scenes")
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    try:
        bench = bench_config.BenchConfig(**{name: getattr(FLAGS, name) for name in BENCH_FLAGS})
        egos = [episodes.from_spec(p) for p in FLAGS.policy]
        bench.traffic()  # the traffic policies load
    except (ValueError, OSError) as e:
        raise app.UsageError(str(e).replace("BenchConfig.", "--")) from None
    names = [e.name for e in egos]
    if len(set(names)) != len(names):
        raise app.UsageError(f"--policy: names must be unique, got {names} (use name=folder)")
    return egos, bench


def main(_):
    egos, bench = validate()
    from cp_jax.jobs.benchmark import run_benchmark

    run_benchmark(egos, bench, FLAGS.out, progress=FLAGS.progress)


if __name__ == "__main__":
    cli.run(main)
