"""Evaluate a saved policy on held-out procedural scenes (self-play: every controllable agent;
cp_jax/jobs/evaluate_policy.py).

    python -m launch.evaluate_policy --policy=assets/anchors/conditioned_small [--sampled] \
        [--styles=normal,aggressive,cautious --scenes=28 --seed=100000] [--mixed]

Prints goal / collision / off-road / timeout rates, the share of agents at fault for their collision
(the benchmark's classifier, every agent taken as the ego) and mean speed per style.
"""

from __future__ import annotations

import json

from absl import flags

from launch import cli

flags.DEFINE_string("policy", None, "a saved policy folder (cp_jax.policy.saved)")
flags.DEFINE_list("styles", ["normal"], "named styles (conditions) to evaluate under")
flags.DEFINE_integer("scenes", 28, "procedural scenes", lower_bound=1)
flags.DEFINE_integer("seed", 100_000, "first scene seed", lower_bound=0)
flags.DEFINE_integer("agents", 12, "agents placed per scene", lower_bound=1)
flags.DEFINE_bool("sampled", False, "sample actions instead of the argmax")
flags.DEFINE_bool("mixed", False, "the styles mixed in every world, rotated so every agent drives under each "
                  "once (rl.evaluate.evaluate_mixed), instead of one world per style where every agent shares it")
flags.DEFINE_bool("at_fault", True, "also the share of agents at fault for their collision (the benchmark's rules)")
flags.DEFINE_string("cache_dir", "~/.cache/cp_jax/scenes", "scenario cache folder")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs.evaluate_policy import evaluate_policy
    from cp_jax.policy import saved
    from cp_jax.sim import conditions

    with cli.checking():  # the styles and the policy, before any scene is built
        if not FLAGS.styles:
            raise ValueError(f"--styles: name at least one; known: {', '.join(sorted(conditions.STYLES))}")
        for style in FLAGS.styles:
            conditions.style(style)
        saved.load(FLAGS.policy)
    results = evaluate_policy(FLAGS.policy, FLAGS.styles, FLAGS.scenes, FLAGS.seed, FLAGS.agents, FLAGS.sampled,
                              FLAGS.mixed, FLAGS.at_fault, FLAGS.cache_dir)
    print(json.dumps(dict(policy=FLAGS.policy, sampled=FLAGS.sampled, mixed=FLAGS.mixed, styles=results)))


if __name__ == "__main__":
    cli.run(main, required=("policy",))
