"""The paper's tables on the test sets, from one command: every cell (post-training run, benchmark of
one policy) run or resumed, then results/tables.md and results/results.json (cp_jax/jobs/results.py).

    python -m launch.results --out=results
    python -m launch.results --out=results --config.max_cells=6     # spread the CPU work over sessions
    python -m launch.results --out=results --readme                 # and the README's headline table
"""

from __future__ import annotations

import json
import os

from absl import flags

from launch import cli

flags.DEFINE_string("out", "results", "output directory")
flags.DEFINE_bool("readme", False, "rewrite the README's results block from OUT/results.json afterwards")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "results.py"),
    "results file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import results, sweep

    with cli.checking():
        module = sweep.sweep_module(FLAGS.config.sweep_file or None)
        results._check_resume(FLAGS.out, results.plan(FLAGS.config, module), FLAGS.config.anchor)
    results.run(FLAGS.config, module, FLAGS.out)
    if FLAGS.readme:
        readme = os.path.join(os.path.dirname(__file__), "..", "README.md")
        with open(os.path.join(FLAGS.out, "results.json")) as f:
            results.update_readme(readme, json.load(f))


if __name__ == "__main__":
    cli.run(main)
