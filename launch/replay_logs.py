"""Log-replay sanity check of real scenes: replay every object from its log through the simulator
and report, per scene, how many vehicles are ever flagged off-road or colliding.

    python -m launch.replay_logs --src=../shared/data/womd_json --out=runs/replay [--png]

Moving vehicles (>= 2 m over the log) and parked ones are reported separately; parked cars in lots
and driveways sit outside the road edges by design. Writes replay.json (and PNGs with --png).
"""

from __future__ import annotations

import glob
import json
import os

from absl import app, flags

flags.DEFINE_string("src", None, "folder of scene files")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json"], "file format")
flags.DEFINE_string("out", "runs/replay", "output folder")
flags.DEFINE_bool("png", False, "render each scene with its logged paths")
flags.DEFINE_integer("max_agents", 128, "static object slots")
flags.DEFINE_integer("max_road_segments", 4096, "static road segment slots")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import numpy as np

    from cp_jax.scenarios import render
    from cp_jax.scenarios.builder import SceneError, build_scenario, fit_to_config
    from cp_jax.scenarios.readers import gpudrive_json
    from cp_jax.sim import env, types

    cfg = types.SimConfig(max_agents=FLAGS.max_agents, max_road_segments=FLAGS.max_road_segments, max_lanes=512,
                          enable_idm=False, obs_partners=8, obs_road=32)
    params = types.default_params()

    @jax.jit
    def replay(scenario):  # ever collided / ever off-road, per object
        final, _ = env.replay_log(scenario, params, cfg)
        return final.first_collision_t < types.INF_T, final.first_offroad_t < types.INF_T

    os.makedirs(FLAGS.out, exist_ok=True)
    report, totals = [], {"moving": [0, 0, 0], "parked": [0, 0, 0]}
    for path in sorted(glob.glob(os.path.join(FLAGS.src, "*.json"))):
        try:
            raw, _ = gpudrive_json.read(path)
            raw, _, _ = fit_to_config(raw, cfg)
            scenario = build_scenario(raw, cfg)
        except SceneError as e:
            report.append(dict(file=os.path.basename(path), skipped=str(e)))
            print(f"skip {os.path.basename(path)}: {e}")
            continue
        coll, off = (np.asarray(x)[: raw.num_objects] for x in replay(scenario))
        moved = np.linalg.norm(raw.goal - raw.log_xy[np.arange(raw.num_objects), np.argmax(raw.log_valid, 1)], axis=-1)
        vehicle = raw.obj_type == types.VEHICLE
        entry = dict(file=os.path.basename(path))
        for label, mask in (("moving", vehicle & (moved >= 2.0)), ("parked", vehicle & (moved < 2.0))):
            n, c, o = int(mask.sum()), int((coll & mask).sum()), int((off & mask).sum())
            entry[label] = dict(vehicles=n, collided=c, offroad=o,
                                collided_ids=np.flatnonzero(coll & mask).tolist(),
                                offroad_ids=np.flatnonzero(off & mask).tolist())
            totals[label] = [totals[label][0] + n, totals[label][1] + c, totals[label][2] + o]
        report.append(entry)
        m = entry["moving"]
        print(f"{entry['file']:32s} moving {m['vehicles']:3d} (coll {m['collided']}, off {m['offroad']})  "
              f"parked {entry['parked']['vehicles']:3d} (coll {entry['parked']['collided']}, "
              f"off {entry['parked']['offroad']})")
        if FLAGS.png:
            paths = np.zeros((cfg.max_agents, raw.num_steps, 2))
            paths[: raw.num_objects] = np.where(raw.log_valid[..., None], raw.log_xy, np.nan)
            render.render(scenario, os.path.join(FLAGS.out, entry["file"].replace(".json", ".png")), paths=paths,
                          title=f"{entry['file']}: logged paths")
    summary = {k: dict(vehicles=v[0], collided_rate=v[1] / max(v[0], 1), offroad_rate=v[2] / max(v[0], 1))
               for k, v in totals.items()}
    with open(os.path.join(FLAGS.out, "replay.json"), "w") as f:
        json.dump(dict(summary=summary, scenes=report), f, indent=2)
    for k, v in summary.items():
        print(f"{k}: {v['vehicles']} vehicles, ever collided {100 * v['collided_rate']:.2f}%, "
              f"ever off-road {100 * v['offroad_rate']:.2f}%")


if __name__ == "__main__":
    flags.mark_flag_as_required("src")
    app.run(main)
