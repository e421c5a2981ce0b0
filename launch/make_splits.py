"""Score every eligible (scene, ego) pair and write the Interactive and Random split manifests
(cp_jax/jobs/make_splits.py).

    python -m launch.make_splits --src=DIR --format=gpudrive_json --n=1000 --seed=0 --out=DIR
    python -m launch.make_splits --format=procedural --procedural_scenes=50 --n=1000 --seed=0 --out=DIR
    python -m launch.make_splits --format=cache --src=CACHE --n=1000 --out=DIR   # any size, one scene at a time

gpudrive_json: every *.json in --src (sorted; --files=START:STOP keeps a slice of them, e.g. 10: for the
scenes a training cache built with --files=0:10 left out); procedural: --procedural_scenes scenes with
seeds 0, 1, ... (--src is ignored). Writes all_pairs.csv, interactive.csv and random.csv into --out and
prints one summary line. An --out holding manifests is refused unless --overwrite (a usage error, exit 2,
as a missing --src or an --out that is a file); exits 1, writing nothing, when no scene was read or the
scenes read hold no eligible pair.
"""

from __future__ import annotations

from absl import flags

from launch import cli

flags.DEFINE_string("src", None, "directory of scene files (gpudrive_json)")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json", "procedural", "cache"],
                  "scene source (cache: a scenario cache folder as --src)")
flags.DEFINE_integer("n", 1000, "pairs per split", lower_bound=0)
flags.DEFINE_integer("seed", 0, "seed of the random split")
flags.DEFINE_string("out", None, "output directory")
flags.DEFINE_integer("procedural_scenes", 50, "scenes to generate (procedural)", lower_bound=1)
flags.DEFINE_string("files", "", "START:STOP: only these of --src's files, sorted by name (e.g. 10:; '' = all)")
flags.DEFINE_bool("overwrite", False, "replace the manifests an existing --out holds")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import make_splits

    with cli.checking():
        make_splits.check_out(FLAGS.out, FLAGS.overwrite)
        scenes = make_splits.read_scenes(FLAGS.format, FLAGS.src, FLAGS.files, FLAGS.procedural_scenes)
    try:
        print(make_splits.write_splits(FLAGS.out, scenes, FLAGS.n, FLAGS.seed))
    except make_splits.NothingRead as e:
        cli.fail(str(e), code=1)


if __name__ == "__main__":
    cli.run(main, required=("out",))
