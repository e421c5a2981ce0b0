"""The log-replay sanity job behind `launch.replay_logs`: replay every object of every real scene from
its log through the simulator and count, per scene, the vehicles ever flagged off-road or colliding.

    summary = replay_logs(src, out, cfg, png=False)

Moving vehicles (>= 2 m over the log) and parked ones are reported separately; parked cars in lots
and driveways sit outside the road edges by design. Writes out/replay.json (and PNGs with png).
"""

from __future__ import annotations

import glob
import json
import os

import jax
import numpy as np

from cp_jax.scenarios import render
from cp_jax.scenarios.builder import SceneError, build_scenario, fit_to_config
from cp_jax.scenarios.readers import gpudrive_json
from cp_jax.sim import env, types


def replay_logs(src: str, out: str, cfg: types.SimConfig, png: bool = False) -> dict:
    """Replay every *.json scene of src (module docstring); returns the summary written to replay.json."""
    params = types.default_params()

    @jax.jit
    def replay(scenario):  # ever collided / ever off-road, per object
        final, _ = env.replay_log(scenario, params, cfg)
        return final.first_collision_t < types.INF_T, final.first_offroad_t < types.INF_T

    os.makedirs(out, exist_ok=True)
    report, totals = [], {"moving": [0, 0, 0], "parked": [0, 0, 0]}
    for path in sorted(glob.glob(os.path.join(src, "*.json"))):
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
        if png:
            paths = np.zeros((cfg.max_agents, raw.num_steps, 2))
            paths[: raw.num_objects] = np.where(raw.log_valid[..., None], raw.log_xy, np.nan)
            render.render(scenario, os.path.join(out, entry["file"].replace(".json", ".png")), paths=paths,
                          title=f"{entry['file']}: logged paths")
    summary = {k: dict(vehicles=v[0], collided_rate=v[1] / max(v[0], 1), offroad_rate=v[2] / max(v[0], 1))
               for k, v in totals.items()}
    with open(os.path.join(out, "replay.json"), "w") as f:
        json.dump(dict(summary=summary, scenes=report), f, indent=2)
    return summary
