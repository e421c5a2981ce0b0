"""Evaluate a saved policy on held-out procedural scenes (self-play: every controllable agent).

    python -m launch.evaluate_policy --policy=assets/anchors/conditioned_small [--sampled] \
        [--styles=normal,aggressive,cautious --scenes=28 --seed=100000]

Prints goal / collision / off-road / timeout rates and mean speed per style (greedy actions unless
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
flags.DEFINE_string("cache_dir", "~/.cache/cp_jax/scenes", "scenario cache folder")
FLAGS = flags.FLAGS


def main(_):
    import jax

    from cp_jax.policy import saved
    from cp_jax.rl import ppo
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.sim import conditions, types

    for style in FLAGS.styles:
        conditions.style(style)  # validate first
    pol = saved.load(FLAGS.policy)
    _, bank = bank_lib.cached_procedural_bank(FLAGS.cache_dir, FLAGS.scenes, FLAGS.seed, FLAGS.agents, pol.sim)
    results = {}
    for style in FLAGS.styles:
        r = ppo.summarise(ppo.evaluate(pol.net, pol.params, bank, conditions.style(style), types.default_params(),
                                       pol.sim, jax.random.PRNGKey(0), greedy=not FLAGS.sampled))
        results[style] = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
    print(json.dumps(dict(policy=FLAGS.policy, sampled=FLAGS.sampled, styles=results)))


if __name__ == "__main__":
    flags.mark_flags_as_required(["policy"])
    app.run(main)
