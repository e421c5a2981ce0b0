"""Log-replay sanity check of real scenes: replay every object from its log through the simulator
and report, per scene, how many objects are ever flagged off-road or colliding, by group (moving and
parked vehicles, pedestrians, cyclists, others; pedestrians are exempt from the off-road test), with
the objects' ids as in the file and the objects left out over --max_agents (cp_jax/jobs/replay_logs.py).

    python -m launch.replay_logs --src=../shared/data/womd_json --out=runs/replay [--png]

A --src that is not a folder of *.json scenes, or an --out already holding replay.json (without
--overwrite), is a usage error (exit 2, launch/cli.py); exits 1 when no scene could be replayed (the
reasons are in replay.json).
"""

from __future__ import annotations

import os
import sys

from absl import flags

from launch import cli

flags.DEFINE_string("src", None, "folder of scene files")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json"], "file format")
flags.DEFINE_string("out", "runs/replay", "output folder")
flags.DEFINE_bool("png", False, "render each scene with its logged paths")
flags.DEFINE_integer("max_agents", 128, "static object slots (objects beyond them are left out and reported)")
flags.DEFINE_integer("max_road_segments", 4096, "static road segment slots")
flags.DEFINE_bool("overwrite", False, "replace the replay.json an existing --out holds")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs.replay_logs import check_out, replay_logs
    from cp_jax.sim import types

    with cli.checking():
        check_out(FLAGS.out, FLAGS.overwrite)
    if not os.path.isdir(FLAGS.src):
        cli.fail(f"--src={FLAGS.src}: not a folder (a folder of {FLAGS.format} scene files)")
    with cli.checking():
        cfg = types.SimConfig(max_agents=FLAGS.max_agents, max_road_segments=FLAGS.max_road_segments, max_lanes=512,
                              enable_idm=False, obs_partners=8, obs_road=32)
    with cli.checking():  # --src holds no *.json scene: nothing was written
        summary = replay_logs(FLAGS.src, FLAGS.out, cfg, FLAGS.png, FLAGS.overwrite)
    for k, v in summary["groups"].items():
        off = "not checked" if v["offroad_rate"] is None else f"{100 * v['offroad_rate']:.2f}%"
        print(f"{k}: {v['objects']} objects, ever collided {100 * v['collided_rate']:.2f}%, ever off-road {off}")
    print(f"{summary['replayed']} scenes replayed, {summary['skipped']} skipped, {summary['truncated_objects']} "
          f"objects over max_agents left out -> {os.path.join(FLAGS.out, 'replay.json')}")
    if not summary["replayed"]:
        sys.exit(f"replay_logs: no scene replayed ({summary['skipped']} skipped): the reasons are in "
                 f"{os.path.join(FLAGS.out, 'replay.json')}")


if __name__ == "__main__":
    cli.run(main, required=("src",))
