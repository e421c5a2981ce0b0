"""The log-replay sanity job behind `launch.replay_logs`: replay every object of every real scene from
its log through the simulator and count, per scene, the objects ever flagged off-road or colliding.

    summary = replay_logs(src, out, cfg, png=False)

- Every log step is checked, step 0 included (the simulator's reset emits no event; step 0 is checked
  here with the same tests, `geometry.overlap_matrix` and `env.is_offroad`).
- Vehicles are reported as moving (>= 2 m over the log) or parked (parked cars in lots and driveways
  sit outside the road edges by design); the other objects under their type (`types.OBJECT_TYPES`).
  Types in OFFROAD_UNCHECKED (pedestrians: `env.is_offroad` exempts them) have offroad null.
- Ids are the objects' ids in the file (their `id`, or their index in `objects` when they have none).
- A scene with more objects than cfg.max_agents is truncated by `builder.fit_to_config`; how many
  objects were left out, and their ids, are reported per scene (and printed). Never-valid objects,
  dropped by the reader, are counted (never_valid).
- A scene that cannot be read or built is skipped with its reason (file and field), never stopping
  the others.
Writes out/replay.json under a temporary name, moved into place once complete (and PNGs with png).
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.io import files
from cp_jax.scenarios import render
from cp_jax.scenarios.builder import SceneError, build_scenario, fit_to_config, object_ids
from cp_jax.scenarios.readers import gpudrive_json
from cp_jax.scenarios.readers.files import scene_files
from cp_jax.sim import env, geometry, types

OFFROAD_UNCHECKED = (types.PEDESTRIAN,)  # object types env.is_offroad never flags
NOTES = [
    "events are checked at every log step from 0 to episode_steps",
    "offroad is null for " + ", ".join(types.OBJECT_TYPES[k] for k in OFFROAD_UNCHECKED)
    + ": the simulator exempts them from the off-road test",
    "ids are the objects' ids in the file (their index in objects when the file has none)",
    "truncated_ids: objects over max_agents left out of the replay (builder.fit_to_config)",
]


def _groups(raw) -> dict[str, np.ndarray]:
    """Report group -> [N] bool: moving and parked vehicles, then one group per other object type."""
    first = np.argmax(raw.log_valid, 1)
    moved = np.linalg.norm(raw.goal - raw.log_xy[np.arange(raw.num_objects), first], axis=-1) >= 2.0
    vehicle = raw.obj_type == types.VEHICLE
    groups = {"moving": vehicle & moved, "parked": vehicle & ~moved}
    for k, name in enumerate(types.OBJECT_TYPES):
        if k != types.VEHICLE:
            groups[name] = raw.obj_type == k
    return groups


def _group_checks_offroad(name: str) -> bool:
    return name not in {types.OBJECT_TYPES[k] for k in OFFROAD_UNCHECKED}


def check_out(out: str, overwrite: bool = False) -> None:
    """Refuse (ValueError naming --out) an out that is a file, or that holds a replay.json unless overwrite."""
    files.check_out(out, ("replay.json",), overwrite, "replay.json")


def replay_logs(src: str, out: str, cfg: types.SimConfig, png: bool = False, overwrite: bool = False) -> dict:
    """Replay every *.json scene of src (module docstring); returns the summary written to replay.json
    (summary["replayed"] == 0: nothing was replayed). Raises ValueError when src is not a folder of
    *.json files, or out is refused (check_out), before anything is written."""
    check_out(out, overwrite)
    paths = scene_files(src, "*.json")
    params = types.default_params()

    @jax.jit
    def replay(scenario):  # [A] ever collided, [A] ever off-road, log step 0 included
        final, _ = env.replay_log(scenario, params, cfg)
        alive0 = scenario.agent_valid & scenario.log_valid[:, 0]
        xy0, yaw0 = scenario.log_xy[:, 0], scenario.log_yaw[:, 0]
        coll0 = jnp.any(geometry.overlap_matrix(xy0, yaw0, scenario.size) & alive0[None, :], -1) & alive0
        off0 = env.is_offroad(xy0, yaw0, scenario, cfg) & alive0
        return (final.first_collision_t < types.INF_T) | coll0, (final.first_offroad_t < types.INF_T) | off0

    os.makedirs(out, exist_ok=True)
    report, totals, truncated = [], {}, 0
    for path in paths:
        file = os.path.basename(path)
        try:
            raw, notes = gpudrive_json.read(path)
            ids_read = object_ids(raw)
            raw, dropped, _ = fit_to_config(raw, cfg)
            scenario = build_scenario(raw, cfg)
        except Exception as e:  # one scene never stops the others: every reason is reported
            reason = str(e) if isinstance(e, SceneError) else f"{file}: unexpected {type(e).__name__}: {e}"
            report.append(dict(file=file, skipped=reason))
            print(f"skip {file}: {reason}")
            continue
        ids = object_ids(raw)
        kept = set(ids.tolist())
        left_out = [int(i) for i in ids_read if i not in kept]
        coll, off = (np.asarray(x)[: raw.num_objects] for x in replay(scenario))
        entry = dict(file=file, objects=len(ids_read), never_valid=notes.dropped_objects,
                     truncated_objects=dropped, truncated_ids=left_out)
        if dropped:
            truncated += dropped
            shown = ", ".join(map(str, left_out[:8])) + (", ..." if len(left_out) > 8 else "")
            print(f"{file}: {len(ids_read)} objects > max_agents={cfg.max_agents}: {dropped} not replayed "
                  f"(ids {shown}; all in replay.json)")
        for label, mask in _groups(raw).items():
            checked = _group_checks_offroad(label)
            entry[label] = dict(objects=int(mask.sum()), collided=int((coll & mask).sum()),
                                collided_ids=ids[coll & mask].tolist(),
                                offroad=int((off & mask).sum()) if checked else None,
                                offroad_ids=ids[off & mask].tolist() if checked else None)
            n, c, o = totals.get(label, (0, 0, 0))
            totals[label] = (n + int(mask.sum()), c + int((coll & mask).sum()), o + int((off & mask).sum()))
        report.append(entry)
        m, p = entry["moving"], entry["parked"]
        print(f"{file:32s} moving {m['objects']:3d} (coll {m['collided']}, off {m['offroad']})  "
              f"parked {p['objects']:3d} (coll {p['collided']}, off {p['offroad']})")
        if png:
            paths_xy = np.zeros((cfg.max_agents, raw.num_steps, 2))
            paths_xy[: raw.num_objects] = np.where(raw.log_valid[..., None], raw.log_xy, np.nan)
            target = os.path.join(out, file.replace(".json", ".png"))
            partial = target[: -len(".png")] + ".partial.png"
            render.render(scenario, partial, paths=paths_xy, title=f"{file}: logged paths")
            os.replace(partial, target)
    replayed = sum("skipped" not in r for r in report)
    summary = dict(
        replayed=replayed, skipped=len(report) - replayed, truncated_objects=truncated,
        groups={k: dict(objects=n, collided_rate=c / max(n, 1),
                        offroad_rate=o / max(n, 1) if _group_checks_offroad(k) else None)
                for k, (n, c, o) in totals.items()},
    )
    target = os.path.join(out, "replay.json")
    with open(target + ".tmp", "w") as f:
        json.dump(dict(summary=summary, notes=NOTES, scenes=report), f, indent=2)
    os.replace(target + ".tmp", target)
    return summary
