"""Run every variant x seed of a sweep file, then the benchmark, then Tables I-V over seeds
(cp_jax/jobs/sweep.py).

    python -m launch.sweep --config=experiments/sweep_small.py --out=runs/sweep
"""

from __future__ import annotations

import os

from absl import flags
from ml_collections import config_flags

from launch import cli

flags.DEFINE_string("out", "runs/sweep", "output directory")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "sweep_small.py"),
    "sweep file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import sweep

    with cli.checking():
        module = sweep.sweep_module(config_flags.get_config_filename(FLAGS["config"]))
        sweep.resolve(FLAGS.config, module)  # every run and the benchmark validated before any work
    sweep.run(FLAGS.config, module, FLAGS.out)


if __name__ == "__main__":
    cli.run(main)
