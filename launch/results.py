"""The paper's tables on the test sets, from one command: every cell (post-training run, benchmark of
one policy) run or resumed, then results/tables.md and results/results.json (cp_jax/jobs/results.py).

    python -m launch.results --out=results
    python -m launch.results --out=results --config.max_cells=6     # spread the CPU work over sessions
"""

from __future__ import annotations

import os

from absl import app, flags
from ml_collections import config_flags

flags.DEFINE_string("out", "results", "output directory")
config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "results.py"),
    "results file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import results, sweep

    try:
        module = sweep.sweep_module(FLAGS.config.sweep_file or None)
        results.plan(FLAGS.config, module)
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None
    results.run(FLAGS.config, module, FLAGS.out)


if __name__ == "__main__":
    app.run(main)
