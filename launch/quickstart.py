"""The simulator on the embedded default: procedural scenes, non-learned controllers, metrics, PNGs
(cp_jax/jobs/quickstart.py).

    python -m launch.quickstart --out=runs/quickstart [--config=experiments/quickstart.py --config.scenes=28]
    [--overwrite: replace an earlier --out]
"""

from __future__ import annotations

import os

from absl import flags

from launch import cli

flags.DEFINE_string("out", "runs/quickstart", "output directory (written whole; one holding files is refused)")
flags.DEFINE_bool("overwrite", False, "replace --out when it already holds files (or is a file)")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "quickstart.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import quickstart

    with cli.checking():
        quickstart.resolve(FLAGS.config)  # every field validated (and the anchor read) before any work
        quickstart.check_out(FLAGS.out, FLAGS.overwrite)  # earlier results are not mixed with these
    quickstart.run(FLAGS.config, FLAGS.out, FLAGS.overwrite)


if __name__ == "__main__":
    cli.run(main)
