"""Evaluate a saved policy on held-out procedural scenes (self-play: every controllable agent).

    python -m launch.evaluate_policy --policy=assets/anchors/conditioned_small [--sampled] \
        [--styles=normal,aggressive,cautious --scenes=28 --seed=100000] [--mixed]

Prints goal / collision / off-road / timeout rates, the share of agents at fault for their collision
(the benchmark's classifier, every agent taken as the ego) and mean speed per style (greedy actions unless
--sampled). The defaults are the training driver's held-out scenes (seeds never used in training).
"""

from __future__ import annotations

import json

from absl import app, flags

flags.DEFINE_string("policy", None, "a saved policy folder (cp_jax.policy.saved)")
flags.DEFINE_list("styles", ["normal"], "named styles (conditions) to evaluate under")
flags.DEFINE_integer("scenes", 28, "procedural scenes")
flags.DEFINE_integer("seed", 100_000, "first scene seed")
flags.DEFINE_integer("agents", 12, "agents placed per scene")
flags.DEFINE_bool("sampled", False, "sample actions instead of the argmax")
flags.DEFINE_bool("mixed", False, "the styles mixed in every world, rotated so every agent drives under each "
                  "once (evaluate.evaluate_mixed), instead of one world per style where every agent shares it")
flags.DEFINE_bool("at_fault", True, "also the share of agents at fault for their collision (the benchmark's rules)")
flags.DEFINE_string("cache_dir", "~/.cache/cp_jax/scenes", "scenario cache folder")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import jax.numpy as jnp

    from cp_jax.bench import metrics as bench_metrics
    from cp_jax.policy import saved
    from cp_jax.rl import evaluate
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.sim import conditions, types

    for style in FLAGS.styles:
        conditions.style(style)  # validate first
    pol = saved.load(FLAGS.policy)
    _, bank = bank_lib.cached_procedural_bank(FLAGS.cache_dir, FLAGS.scenes, FLAGS.seed, FLAGS.agents, pol.sim)
    key, params = jax.random.PRNGKey(0), types.default_params()
    classify = bench_metrics.at_fault_in if FLAGS.at_fault else None
    if FLAGS.mixed:
        conds = jnp.stack([conditions.style(style) for style in FLAGS.styles])
        rates = evaluate.evaluate_mixed(pol.net, pol.params, bank, conds, params, pol.sim, key,
                                        greedy=not FLAGS.sampled, classify=classify)
    else:
        rates = [evaluate.summarise(evaluate.evaluate(pol.net, pol.params, bank, conditions.style(style), params,
                                                      pol.sim, key, greedy=not FLAGS.sampled, classify=classify))
                 for style in FLAGS.styles]
    results = {style: {("at_fault" if k == "classified" else k): round(v, 3) if isinstance(v, float) else v
                       for k, v in r.items()}
               for style, r in zip(FLAGS.styles, rates, strict=True)}
    print(json.dumps(dict(policy=FLAGS.policy, sampled=FLAGS.sampled, mixed=FLAGS.mixed, styles=results)))


if __name__ == "__main__":
    flags.mark_flags_as_required(["policy"])
    app.run(main)
