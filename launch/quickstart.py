"""The simulator on the embedded default: procedural scenes, non-learned controllers, metrics, PNGs
(cp_jax/jobs/quickstart.py).

    python -m launch.quickstart --out=runs/quickstart [--config=experiments/quickstart.py --config.scenes=28]
"""

from __future__ import annotations

import os

from absl import app, flags
from ml_collections import config_flags

flags.DEFINE_string("out", "runs/quickstart", "output directory")
config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "quickstart.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import quickstart

    quickstart.run(FLAGS.config, FLAGS.out)


if __name__ == "__main__":
    app.run(main)
