"""Copy a finished training run's policy into a self-describing folder (e.g. assets/anchors/NAME), with
its lineage, curve and README (cp_jax/jobs/export_policy.py).

    python -m launch.export_policy --workdir=runs/anchor_small --out=assets/anchors/conditioned_small
"""

from __future__ import annotations

from absl import flags

from launch import cli

flags.DEFINE_string("workdir", None, "a finished launch.train_anchor run")
flags.DEFINE_string("out", None, "destination folder")
flags.DEFINE_bool("overwrite", False, "replace --out when it already holds files (or is a file)")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs.export_policy import export

    with cli.checking():  # a missing or damaged WORKDIR/policy or run_info.json is refused before anything is copied
        export(FLAGS.workdir, FLAGS.out, FLAGS.overwrite)


if __name__ == "__main__":
    cli.run(main, required=("workdir", "out"))
