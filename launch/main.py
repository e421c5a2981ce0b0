"""The main job on the embedded default: the shipped anchor, CounterPlay vs PPO-Continue at the same
small budget, and the benchmark on procedural splits (no download). cp_jax/jobs/main.py.

    python -m launch.main --out=runs/main [--config=experiments/main.py --config.budget_frac=0.02]
"""

from __future__ import annotations

import os

from absl import flags

from launch import cli

flags.DEFINE_string("out", "runs/main", "output directory")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "main.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import main as main_job

    with cli.checking():
        main_job.resolve(FLAGS.config)  # every field validated before any work
    main_job.run(FLAGS.config, FLAGS.out)


if __name__ == "__main__":
    cli.run(main)
