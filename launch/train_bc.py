"""Train the "SMART stand-in (BC)" traffic policy: behaviour cloning on inverse-dynamics labels.

    python -m launch.train_bc --config=experiments/bc_small.py --workdir=runs/bc_small
    python -m launch.train_bc --config=experiments/bc_small.py --config.scenes.real=DIR --workdir=...

Every field is validated before any work (errors name `config.x`); what the job writes is in
cp_jax/jobs/clone.py.
"""

from __future__ import annotations

import json
import os

from absl import flags

from launch import cli

flags.DEFINE_string("workdir", None, "run folder (created; an existing run there is resumed)")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "bc_small.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import clone, loop

    with cli.checking():
        clone.resolve(FLAGS.config)  # validates every field before any work
        loop.check_resume(FLAGS.workdir, FLAGS.config)  # a folder's checkpoints resume only under its config
    result = clone.run(FLAGS.config, FLAGS.workdir)
    print(json.dumps(dict(labels=result["labels"], final=result["final"], eval=result["eval"]), indent=1))
    print(f"done in {result['seconds']:.0f}s -> {FLAGS.workdir}")


if __name__ == "__main__":
    cli.run(main, required=("workdir",))
