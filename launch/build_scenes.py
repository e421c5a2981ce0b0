"""Convert a folder of scenes once into a scenario cache (TFDS ArrayRecord, padded arrays).

    python -m launch.build_scenes --src=DIR --format=gpudrive_json|tfexample|procedural --out=DIR
    python -m launch.build_scenes --src=../shared/data/womd_json --files=0:10 --out=DIR   # the first ten files
    python -m launch.build_scenes --src=... --out=DIR --max_segment=2.5 --max_road_segments=8192 \
        --cell_edges=64 --cell_lanes=48   # roads cut into <= 2.5 m segments, as procedural roads are

Large sets convert in parallel: --workers processes share --shards shards (contiguous runs of the files,
or of the procedural seeds), each written as its own cache under OUT/shards/ and read back as one cache.
A killed build started again with the same flags keeps its finished shards and redoes the rest:

    python -m launch.build_scenes --format=procedural --procedural_scenes=20000 --kinds=ALL --max_agents=16 \
        --max_road_segments=2048 --max_lanes=64 --workers=2 --shards=40 --out=DIR   # a training stream's cache

--max_segment sets how long a road segment may be (10 m by default). A policy sees the nearest
obs_road segments, so shorter segments show it a nearer, finer road; they need more segment slots,
and more candidates per grid cell (--cell_edges, --cell_lanes) so that the off-road test and the lane
terms still find every nearby edge and lane (docs/measurements/real_scenes.md: 2.5 m with 64 / 48).

Every scene is validated; a malformed file never stops the run: it is skipped (a line `skip SCENE:
REASON` on stderr names the file and the field) and reported (cp_jax/jobs/convert.py). Ends with a one-line
summary and writes report.json. Exits 1 when no scene converted (the reasons are in report.json). Counts
below their minimum (--workers, --shards, --procedural_scenes, --agents >= 1, --seed >= 0) and an --out that
is a file are usage errors (exit 2), before OUT is created.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from launch import cli

flags.DEFINE_string("src", None, "folder of scene files (unused for --format=procedural)")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json", "tfexample", "procedural"], "input format")
flags.DEFINE_string("out", None, "output folder (the cache and report.json)")
flags.DEFINE_integer("procedural_scenes", 64, "scenes to generate for --format=procedural", lower_bound=1)
flags.DEFINE_integer("max_agents", 128, "static object slots")
flags.DEFINE_integer("max_road_segments", 4096, "static road segment slots")
flags.DEFINE_integer("max_lanes", 512, "static lane slots")
flags.DEFINE_integer("log_steps", 91, "log steps every scene must have (shorter logs are skipped)")
flags.DEFINE_float("max_segment", None, "longest road segment in m (default: the readers' 10 m)")
flags.DEFINE_integer("cell_edges", None, "road-edge candidates per grid cell (default: SimConfig's)")
flags.DEFINE_integer("cell_lanes", None, "lane candidates per grid cell (default: SimConfig's)")
flags.DEFINE_integer("seed", 0, "--format=procedural: scene i is drawn from seed + i", lower_bound=0)
flags.DEFINE_integer("agents", 12, "--format=procedural: agents placed per scene", lower_bound=1)
flags.DEFINE_string("kinds", "", "--format=procedural: layout kinds cycled over the scenes, comma-separated "
                    "('' = the seven default kinds, ALL = every kind incl. highway)")
flags.DEFINE_integer("workers", 1, "processes converting shards at once", lower_bound=1)
flags.DEFINE_integer("shards", None, "shards the input is cut into (default: one per worker; > 1 writes OUT/shards/)",
                     lower_bound=1)
flags.DEFINE_string("files", "", "START:STOP: only these of --src's files, sorted by name (e.g. 0:10; '' = all)")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs import convert
    from cp_jax.sim import types

    cells = {k: getattr(FLAGS, k) for k in ("cell_edges", "cell_lanes") if getattr(FLAGS, k) is not None}
    try:  # the input is checked before anything is written
        if os.path.exists(FLAGS.out) and not os.path.isdir(FLAGS.out):
            raise ValueError(f"--out={FLAGS.out}: a file, not a folder (the cache and report.json)")
        cfg = types.SimConfig(max_agents=FLAGS.max_agents, max_road_segments=FLAGS.max_road_segments,
                              max_lanes=FLAGS.max_lanes, log_steps=FLAGS.log_steps, episode_steps=FLAGS.log_steps - 1,
                              **cells)
        kinds = tuple(k for k in FLAGS.kinds.split(",") if k)
        if kinds == ("ALL",):
            from cp_jax.scenarios.procedural import layouts

            kinds = layouts.ALL_KINDS
        spec = convert.Spec(FLAGS.format, FLAGS.src, FLAGS.procedural_scenes, FLAGS.files, FLAGS.max_segment,
                            convert.Procedural(FLAGS.seed, FLAGS.agents, kinds, cfg.max_agents, cfg.max_road_segments))
        shards = FLAGS.shards or FLAGS.workers
        log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        # (on stderr: TFDS's own output is silenced on stdout while the scenes stream into the cache)
        if shards > 1:
            summary = convert.convert_parallel(FLAGS.out, cfg, spec, shards, FLAGS.workers, log=log)
        else:
            summary = convert.convert(FLAGS.out, cfg, spec.sources(),
                                      convert.reading_options(FLAGS.format, FLAGS.max_segment), log=log)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    rate = (f"{summary['scenes_per_s']:.1f} scenes/s ({summary['workers']} workers)" if "workers" in summary
            else f"{summary['scenes_per_s']:.1f} scenes/s")
    print(f"{summary['converted']} scenes converted, {summary['skipped']} skipped, "
          f"{summary['truncated_objects']} objects and {summary['truncated_segments']} road segments truncated, "
          f"{rate} -> {FLAGS.out} (report.json)")
    if not summary["converted"]:
        sys.exit(f"build_scenes: no scene converted ({summary['skipped']} skipped): the reasons are in "
                 f"{os.path.join(FLAGS.out, 'report.json')}")


if __name__ == "__main__":
    cli.run(main, required=("out",))
