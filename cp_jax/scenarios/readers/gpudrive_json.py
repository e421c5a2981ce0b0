"""Reader for the GPUDrive / PufferDrive JSON layout of Waymo Open Motion Dataset scenes.

Both generations of the layout are read: the newer one carries `scenario_id`, per-object `id`,
`height`, `mark_as_expert` and `metadata` (`sdc_track_index`, ...); the older lacks them and stores
headings in unwrapped degrees (detected against the direction of motion, see
`common.heading_unit`). Errors raise SceneError naming the file and the field.
"""

from __future__ import annotations

import json
import os

import numpy as np

from cp_jax.scenarios.raw import RawScene
from cp_jax.scenarios.readers import common


def _require(d: dict, key: str, where: str, path: str):
    if not isinstance(d, dict) or key not in d:
        common.fail(path, f"{where}{key}", "missing")
    return d[key]


def _xy(points, path: str, field: str) -> np.ndarray:
    try:
        return np.array([[p["x"], p["y"]] for p in points], np.float64).reshape(-1, 2)
    except (KeyError, TypeError) as e:
        common.fail(path, field, f"expected a list of {{x, y}} points ({e!r})")


def parse(data: dict, path: str) -> common.SceneParts:
    """The JSON object of one scene -> SceneParts (no validation beyond field presence)."""
    objects = _require(data, "objects", "", path)
    roads = _require(data, "roads", "", path)
    if not isinstance(objects, list) or not objects:
        common.fail(path, "objects", "empty or not a list")
    n = len(objects)
    t = len(_require(objects[0], "position", "objects[0].", path))
    xy = np.zeros((n, t, 2))
    vel = np.zeros((n, t, 2))
    yaw = np.zeros((n, t))
    valid = np.zeros((n, t), bool)
    size = np.zeros((n, 2))
    goal = np.full((n, 2), np.nan)
    obj_type, ids = [], []
    for i, o in enumerate(objects):
        w = f"objects[{i}]."
        pos = _require(o, "position", w, path)
        for field, value in (("position", pos), ("heading", _require(o, "heading", w, path)),
                             ("velocity", _require(o, "velocity", w, path)), ("valid", _require(o, "valid", w, path))):
            if len(value) != t:
                common.fail(path, f"{w}{field}", f"length {len(value)}, expected {t} (as objects[0].position)")
        xy[i] = _xy(pos, path, f"{w}position")
        vel[i] = _xy(o["velocity"], path, f"{w}velocity")
        yaw[i] = np.asarray(o["heading"], np.float64)
        valid[i] = np.asarray(o["valid"], bool)
        size[i] = (float(_require(o, "length", w, path)), float(_require(o, "width", w, path)))
        if "goalPosition" in o and o["goalPosition"] is not None:
            g = o["goalPosition"]
            goal[i] = (g.get("x", np.nan), g.get("y", np.nan))
        obj_type.append(str(_require(o, "type", w, path)))
        ids.append(int(o.get("id", i)))
    polylines = []
    for k, r in enumerate(roads):
        kind = str(_require(r, "type", f"roads[{k}].", path))
        geom = _xy(_require(r, "geometry", f"roads[{k}].", path), path, f"roads[{k}].geometry")
        polylines.append((kind, geom, int(r["id"]) if r.get("id") is not None else -1))
    tl = {}
    for key, value in (data.get("tl_states") or {}).items():
        states = value.get("state", []) if isinstance(value, dict) else []
        steps = value.get("time_index", list(range(len(states)))) if isinstance(value, dict) else []
        arr = np.zeros(t, np.int32)
        for step, s in zip(steps, states, strict=False):
            if 0 <= int(step) < t:
                arr[int(step)] = common.TL_IDS.get(str(s), 0)
        lane_id = value.get("lane_id", [key])[0] if isinstance(value, dict) and value.get("lane_id") else key
        try:
            tl[int(lane_id)] = arr
        except ValueError:
            common.fail(path, f"tl_states[{key!r}]", "lane id is not an integer")
    sdc = int((data.get("metadata") or {}).get("sdc_track_index", -1))
    name = str(data.get("scenario_id") or data.get("name") or os.path.basename(path))
    return common.SceneParts(
        name=f"{path} ({name})" if name not in path else path,
        polylines=polylines, xy=xy, yaw=yaw, vel=vel, valid=valid, size=size, obj_type=obj_type,
        goal=goal, tl=tl, sdc=sdc, object_ids=np.asarray(ids),
    )


def read(path: str, decimate_tol: float = 0.1,
         max_segment: float = common.MAX_SEGMENT) -> tuple[RawScene, common.ReadNotes]:
    """Read one JSON scene file -> (RawScene, notes); road segments <= max_segment m. Raises SceneError
    naming file and field."""
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        common.fail(path, "<file>", f"not valid JSON: {e}")
    except OSError as e:
        common.fail(path, "<file>", f"cannot read: {e}")
    try:
        parts = parse(data, path)
    except (TypeError, AttributeError, ValueError, KeyError) as e:  # a value of the wrong kind somewhere
        if isinstance(e, common.SceneError):
            raise
        common.fail(path, "<structure>", f"a field has the wrong type: {type(e).__name__}: {e}")
    return common.assemble(parts, decimate_tol, max_segment)
