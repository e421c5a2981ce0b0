"""Log-replay sanity check of real scenes: replay every object from its log through the simulator
and report, per scene, how many vehicles are ever flagged off-road or colliding (cp_jax/jobs/replay_logs.py).

    python -m launch.replay_logs --src=../shared/data/womd_json --out=runs/replay [--png]
"""

from __future__ import annotations

from absl import app, flags

flags.DEFINE_string("src", None, "folder of scene files")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json"], "file format")
flags.DEFINE_string("out", "runs/replay", "output folder")
flags.DEFINE_bool("png", False, "render each scene with its logged paths")
flags.DEFINE_integer("max_agents", 128, "static object slots")
flags.DEFINE_integer("max_road_segments", 4096, "static road segment slots")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs.replay_logs import replay_logs
    from cp_jax.sim import types

    cfg = types.SimConfig(max_agents=FLAGS.max_agents, max_road_segments=FLAGS.max_road_segments, max_lanes=512,
                          enable_idm=False, obs_partners=8, obs_road=32)
    summary = replay_logs(FLAGS.src, FLAGS.out, cfg, FLAGS.png)
    for k, v in summary.items():
        print(f"{k}: {v['vehicles']} vehicles, ever collided {100 * v['collided_rate']:.2f}%, "
              f"ever off-road {100 * v['offroad_rate']:.2f}%")


if __name__ == "__main__":
    flags.mark_flag_as_required("src")
    app.run(main)
