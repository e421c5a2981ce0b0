"""Train the "SMART stand-in (BC)" traffic policy: behaviour cloning on inverse-dynamics labels.

    python -m launch.train_bc --config=experiments/bc_small.py --workdir=runs/bc_small
    python -m launch.train_bc --config=experiments/bc_small.py --config.scenes.real=DIR --workdir=...

Every field is validated before any work (errors name `config.x`); what the job writes is in
cp_jax/jobs/clone.py.
"""

from __future__ import annotations

import json
import os

from absl import app, flags
from ml_collections import config_flags

flags.DEFINE_string("workdir", None, "run folder (created; an existing run there is resumed)")
config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "bc_small.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import clone

    clone.resolve(FLAGS.config)  # validates every field before any work
    result = clone.run(FLAGS.config, FLAGS.workdir)
    print(json.dumps(dict(labels=result["labels"], final=result["final"], eval=result["eval"]), indent=1))
    print(f"done in {result['seconds']:.0f}s -> {FLAGS.workdir}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["workdir"])
    app.run(main)
