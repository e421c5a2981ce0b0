"""The paper's tables on the test sets, from one command: every cell (post-training run, benchmark of
one policy) run or resumed, then results/tables.md and results/results.json (cp_jax/jobs/results.py).

    python -m launch.results --out=results
    python -m launch.results --out=results --config.max_cells=6     # spread the CPU work over sessions
    python -m launch.results --out=results --readme                 # and README's / STATUS's headline table
    python -m launch.results --out=results --config.only="('bench/anchor',)" --readme   # tables only: a finished
                                                                    # prefix runs nothing (max_cells=0 runs every cell)
"""

from __future__ import annotations

import json
import os

from absl import flags

from launch import cli

flags.DEFINE_string("out", "results", "output directory")
flags.DEFINE_bool("readme", False, "rewrite the results block of README.md and STATUS.md from OUT/results.json "
                  "afterwards")
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
        with open(os.path.join(FLAGS.out, "results.json")) as f:
            figures = json.load(f)
        paths = [os.path.join(os.path.dirname(__file__), "..", name) for name in ("README.md", "STATUS.md")]
        for path in paths:  # both have the block, or neither is touched
            if results.README_BEGIN not in open(path).read():
                raise ValueError(f"{path}: no {results.README_BEGIN} ... {results.README_END} block to replace")
        for path in paths:
            results.update_readme(path, figures)


if __name__ == "__main__":
    cli.run(main)
