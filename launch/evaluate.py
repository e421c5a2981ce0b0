"""The benchmark: policies drive one ego per (scene, ego) pair under eight traffic regimes.

    python -m launch.evaluate --policy=assets/anchors/conditioned_small --scenes=procedural \
        --splits=interactive,random --regimes=all --ego_styles=normal --seeds=3 --out=runs/bench
    python -m launch.evaluate --policy=anchor=assets/anchors/conditioned_small --policy=idm ... --figures=4

--policy: a saved policy folder, `name=folder`, or a built-in driver (expert = log replay, idm,
const_vel); the first is the reference of Table III. --scenes: `procedural` (--procedural_scenes
scenes from seed --procedural_seed, both splits of --pairs pairs each) or a converted scene cache
(launch.build_scenes) with split manifests in --manifests (launch.make_splits).

Writes into --out: episodes.jsonl (one line per episode: policy, split, regime, ego_style, seed,
scene_id, ego and its metrics, so two policies can be compared pair by pair), summary.json and
summary.csv (one record per policy x split x regime x ego style; cp_jax.bench.report), tables.md
(Tables I, III, IV), timing.json, and with --figures=N, N Fig.-3-style PNGs (first two policies
side by side on pairs where their outcomes differ). Definitions: cp_jax/bench/*.py.
"""

from __future__ import annotations

import os

from absl import app, flags

flags.DEFINE_multi_string("policy", None, "policy folder, name=folder, or a built-in (expert, idm, const_vel)")
flags.DEFINE_string("scenes", "procedural", "'procedural' or a converted scene cache directory")
flags.DEFINE_string("manifests", None, "directory with interactive.csv / random.csv (cache scenes)")
flags.DEFINE_list("splits", ["interactive", "random"], "splits to run")
flags.DEFINE_list("regimes", ["all"], "traffic regimes, or 'all'")
flags.DEFINE_list("ego_styles", ["normal"], "the ego's style(s)")
flags.DEFINE_integer("seeds", 1, "seeds 0 .. seeds-1 (they vary the sampled actions of policy traffic)", lower_bound=1)
flags.DEFINE_string("out", None, "output directory")
flags.DEFINE_integer("figures", 0, "Fig.-3-style PNGs to write", lower_bound=0)
flags.DEFINE_integer("pairs", 200, "pairs per procedural split", lower_bound=1)
flags.DEFINE_integer("procedural_scenes", 60, "procedural scenes the splits are drawn from", lower_bound=1)
flags.DEFINE_integer("procedural_seed", 300_000, "first procedural scene seed (training uses 0.., held-out 100000..)")
flags.DEFINE_integer("agents", 12, "agents placed per procedural scene", lower_bound=1)
flags.DEFINE_string("anchor_policy", "assets/anchors/conditioned_small", "conditioned anchor (style regimes)")
flags.DEFINE_string("ppo_policy", "assets/anchors/ppo_small", "non-conditioned PPO policy (ppo regime)")
flags.DEFINE_string("bc_policy", "assets/anchors/smart_bc", "behaviour-cloned policy (smart_bc regime)")
flags.DEFINE_string("cache_dir", "~/.cache/cp_jax/scenes", "procedural scene cache")
flags.DEFINE_bool("progress", True, "progress bar")
FLAGS = flags.FLAGS


def _driver(spec: str):
    from cp_jax.bench import episodes
    from cp_jax.policy import saved

    name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
    if path in episodes.BUILTIN_EGOS:
        return episodes.builtin(path)._replace(name=name or path)
    if not os.path.isdir(path):
        raise app.UsageError(f"--policy={spec}: {path!r} is neither a policy folder nor one of "
                             f"{sorted(episodes.BUILTIN_EGOS)}")
    return episodes.from_saved(name or os.path.basename(os.path.normpath(path)), saved.load(path))


def validate():
    """Every flag checked before any work; returns (egos, traffic, regimes)."""
    from cp_jax.bench import episodes, suite
    from cp_jax.policy import saved
    from cp_jax.sim import conditions

    if not FLAGS.policy:
        raise app.UsageError("--policy: give at least one")
    if not FLAGS.out:
        raise app.UsageError("--out: required")
    for s in FLAGS.splits:
        if s not in suite.SPLITS:
            raise app.UsageError(f"--splits: unknown split {s!r}; known: {', '.join(suite.SPLITS)}")
    regimes = list(episodes.REGIMES) if FLAGS.regimes == ["all"] else FLAGS.regimes
    for r in regimes:
        if r not in episodes.REGIMES:
            raise app.UsageError(f"--regimes: unknown regime {r!r}; known: all, {', '.join(episodes.REGIMES)}")
    for s in FLAGS.ego_styles:
        if s not in conditions.STYLES:
            raise app.UsageError(f"--ego_styles: unknown style {s!r}; known: {', '.join(sorted(conditions.STYLES))}")
    if FLAGS.scenes != "procedural" and not os.path.isdir(FLAGS.scenes):
        raise app.UsageError(f"--scenes: {FLAGS.scenes!r} is neither 'procedural' nor a directory")
    egos = [_driver(p) for p in FLAGS.policy]
    names = [e.name for e in egos]
    if len(set(names)) != len(names):
        raise app.UsageError(f"--policy: names must be unique, got {names} (use name=folder)")
    traffic = {}
    for key, flag in (("anchor", "anchor_policy"), ("ppo", "ppo_policy"), ("smart_bc", "bc_policy")):
        needed_by = [r for r in regimes if episodes.REGIME_POLICY[r] == key]
        if needed_by:
            path = getattr(FLAGS, flag)
            if not os.path.isdir(path):
                raise app.UsageError(f"--{flag}: {path!r} is not a policy folder (needed by regimes {needed_by})")
            traffic[key] = episodes.from_saved(key, saved.load(path))
    return egos, traffic, regimes


def main(_):
    egos, traffic, regimes = validate()
    if FLAGS.scenes == "procedural":
        scenes = dict(kind="procedural", num_scenes=FLAGS.procedural_scenes, pairs=FLAGS.pairs,
                      seed=FLAGS.procedural_seed, agents=FLAGS.agents, cache_dir=FLAGS.cache_dir)
    else:
        manifests = FLAGS.manifests or os.path.join(FLAGS.scenes, "splits")
        scenes = dict(kind="cache", path=FLAGS.scenes, manifests=manifests)
    from cp_jax.bench.harness import run_benchmark

    run_benchmark(egos, traffic, regimes, FLAGS.splits, FLAGS.ego_styles, FLAGS.seeds, FLAGS.out, scenes,
                  figures=FLAGS.figures, progress=FLAGS.progress)


if __name__ == "__main__":
    app.run(main)
