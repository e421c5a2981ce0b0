"""Reader for the GPUDrive / PufferDrive JSON layout of Waymo Open Motion Dataset scenes.

Both generations of the layout are read: the newer one carries `scenario_id`, per-object `id`,
`height`, `mark_as_expert` and `metadata` (`sdc_track_index`, ...); the older lacks them and stores
headings in unwrapped degrees (detected against the direction of motion, see
`common.heading_unit`). Every value is checked for its JSON type (rule R0 of `common`: a number
where a number is due, booleans or 0/1 for `valid`, strings for types): errors raise SceneError
naming the file and the field, down to the value (e.g. objects[1].valid[4]). An object's goalPosition
missing or null, with a coordinate null, or with a NaN / infinite coordinate is replaced by its final valid
logged position, and reported (ReadNotes.coerced: missing_goal, partial_goal, nonfinite_goal).
"""

from __future__ import annotations

import json
import os

import numpy as np

from cp_jax.scenarios.raw import RawScene
from cp_jax.scenarios.readers import common
from cp_jax.sim import types

_NUMBER = (int, float)  # a JSON number as json.load returns it (`type(v) in _NUMBER` excludes booleans)
_KINDS = {str: "a string", bool: "a boolean", type(None): "null", dict: "an object", list: "a list"}
_MISSING = object()


def _bad(path: str, field: str, value, expected: str):
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    common.fail(path, field, f"{shown} is {_KINDS.get(type(value), type(value).__name__)}, expected {expected}")


def _require(d: dict, key: str, where: str, path: str):
    if not isinstance(d, dict) or key not in d:
        common.fail(path, f"{where}{key}", "missing")
    return d[key]


def _list(value, path: str, field: str) -> list:
    if not isinstance(value, list):
        _bad(path, field, value, "a list")
    return value


def _number(value, path: str, field: str) -> float:
    if type(value) not in _NUMBER:
        _bad(path, field, value, "a number")
    return float(value)


def _numbers(values, path: str, field: str) -> np.ndarray:
    """A JSON list of numbers -> float64 [n]; anything else refused, naming field[k]."""
    values = _list(values, path, field)
    if not all(type(v) in _NUMBER for v in values):
        k = next(k for k, v in enumerate(values) if type(v) not in _NUMBER)
        _bad(path, f"{field}[{k}]", values[k], "a number")
    return np.asarray(values, np.float64).reshape(-1)


def _xy(points, path: str, field: str) -> np.ndarray:
    """A JSON list of {x, y, ...} points -> float64 [n, 2]; anything else refused, naming field[k].x."""
    points = _list(points, path, field)
    for k, p in enumerate(points):
        if not isinstance(p, dict):
            _bad(path, f"{field}[{k}]", p, "an {x, y} object")
    cols = []
    for key in "xy":
        col = [p.get(key, _MISSING) for p in points]
        if not all(type(v) in _NUMBER for v in col):
            k = next(k for k, v in enumerate(col) if type(v) not in _NUMBER)
            if col[k] is _MISSING:
                common.fail(path, f"{field}[{k}].{key}", "missing")
            _bad(path, f"{field}[{k}].{key}", col[k], "a number")
        cols.append(col)
    return np.asarray(cols, np.float64).reshape(2, -1).T


def _flags(values, path: str, field: str) -> tuple[np.ndarray, bool]:
    """JSON booleans -> bool [n], or 0 / 1 numbers (coercion 'valid_as_number': the bool says so); a
    string ("false"), null or any other number is refused, naming field[k]."""
    values = _list(values, path, field)
    if all(type(v) is bool for v in values):
        return np.asarray(values, bool), False
    for k, v in enumerate(values):
        if type(v) is not bool and not (type(v) in _NUMBER and v in (0, 1)):
            _bad(path, f"{field}[{k}]", v, "true / false (or 0 / 1)")
    return np.asarray(values, np.float64) == 1, True


def _integer(value, path: str, field: str) -> int:
    if type(value) not in _NUMBER or not float(value).is_integer():
        _bad(path, field, value, "an integer")
    return int(value)


def parse(data: dict, path: str) -> common.SceneParts:
    """The JSON object of one scene -> SceneParts (field presence and JSON types, rule R0 of
    `common`; the values are `common.validate`'s)."""
    if not isinstance(data, dict):
        _bad(path, "<file>", data, "a JSON object")
    objects = _list(_require(data, "objects", "", path), path, "objects")
    roads = _list(_require(data, "roads", "", path), path, "roads")
    if not objects:
        common.fail(path, "objects", "empty")
    n = len(objects)
    t = len(_list(_require(objects[0], "position", "objects[0].", path), path, "objects[0].position"))
    xy = np.zeros((n, t, 2))
    vel = np.zeros((n, t, 2))
    yaw = np.zeros((n, t))
    valid = np.zeros((n, t), bool)
    size = np.zeros((n, 2))
    goal = np.full((n, 2), np.nan)
    obj_type, ids = [], []
    coerced: dict[str, list[int]] = {}
    for i, o in enumerate(objects):
        w = f"objects[{i}]."
        if not isinstance(o, dict):
            _bad(path, f"objects[{i}]", o, "an object")
        for field in ("position", "heading", "velocity", "valid"):
            value = _list(_require(o, field, w, path), path, f"{w}{field}")
            if len(value) != t:
                common.fail(path, f"{w}{field}", f"length {len(value)}, expected {t} (as objects[0].position)")
        xy[i] = _xy(o["position"], path, f"{w}position")
        vel[i] = _xy(o["velocity"], path, f"{w}velocity")
        yaw[i] = _numbers(o["heading"], path, f"{w}heading")
        valid[i], as_numbers = _flags(o["valid"], path, f"{w}valid")
        if as_numbers:
            coerced.setdefault("valid_as_number", []).append(i)
        size[i] = (_number(_require(o, "length", w, path), path, f"{w}length"),
                   _number(_require(o, "width", w, path), path, f"{w}width"))
        g = o.get("goalPosition")
        if g is None:  # the final valid position stands in (common.assemble): reported
            coerced.setdefault("missing_goal", []).append(i)
        else:
            if not isinstance(g, dict):
                _bad(path, f"{w}goalPosition", g, "an {x, y} object or null")
            xy_goal = [g.get(key) for key in "xy"]
            for key, v in zip("xy", xy_goal, strict=True):
                if v is not None and type(v) not in _NUMBER:
                    _bad(path, f"{w}goalPosition.{key}", v, "a number or null")
            if xy_goal[0] is None and xy_goal[1] is None:
                coerced.setdefault("missing_goal", []).append(i)
            elif xy_goal[0] is None or xy_goal[1] is None:
                coerced.setdefault("partial_goal", []).append(i)
            elif not np.isfinite(xy_goal).all():  # NaN / Infinity, which json.load reads as numbers
                coerced.setdefault("nonfinite_goal", []).append(i)
            goal[i] = [np.nan if v is None else v for v in xy_goal]
        kind = _require(o, "type", w, path)
        if not isinstance(kind, str):
            _bad(path, f"{w}type", kind, "a string")
        if kind not in types.OBJECT_TYPES:
            coerced.setdefault("other_type", []).append(i)
        obj_type.append(kind)
        ids.append(i if o.get("id") is None else _integer(o["id"], path, f"{w}id"))
    polylines = []
    for k, r in enumerate(roads):
        w = f"roads[{k}]."
        if not isinstance(r, dict):
            _bad(path, f"roads[{k}]", r, "an object")
        kind = _require(r, "type", w, path)
        if not isinstance(kind, str):
            _bad(path, f"{w}type", kind, "a string")
        geom = _xy(_require(r, "geometry", w, path), path, f"{w}geometry")
        polylines.append((kind, geom, -1 if r.get("id") is None else _integer(r["id"], path, f"{w}id")))
    tl = _lights(data.get("tl_states"), t, path)
    sdc = -1
    metadata = data.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            _bad(path, "metadata", metadata, "an object")
        if "sdc_track_index" in metadata:
            sdc = _integer(metadata["sdc_track_index"], path, "metadata.sdc_track_index")
            if not -1 <= sdc < n:
                common.fail(path, "metadata.sdc_track_index", f"{sdc} is not an object index (0..{n - 1}) or -1")
    name = str(data.get("scenario_id") or data.get("name") or os.path.basename(path))
    return common.SceneParts(
        name=f"{path} ({name})" if name not in path else path,
        polylines=polylines, xy=xy, yaw=yaw, vel=vel, valid=valid, size=size, obj_type=obj_type,
        goal=goal, tl=tl, sdc=sdc, object_ids=np.asarray(ids), coerced=coerced,
    )


def _lights(states, t: int, path: str) -> dict[int, np.ndarray]:
    """tl_states (lane id -> {state [names], time_index [steps], lane_id [ids]}) -> lane id -> [t] TL_*
    ids; an unknown state name or a step that is not an integer is refused, naming the field."""
    if states is None:
        return {}
    if not isinstance(states, dict):
        _bad(path, "tl_states", states, "an object")
    tl = {}
    for key, value in states.items():
        w = f"tl_states[{key!r}]"
        if not isinstance(value, dict):
            _bad(path, w, value, "an object")
        names = _list(value.get("state", []), path, f"{w}.state")
        steps = _list(value.get("time_index", list(range(len(names)))), path, f"{w}.time_index")
        arr = np.zeros(t, np.int32)
        for j, (step, s) in enumerate(zip(steps, names, strict=False)):
            step = _integer(step, path, f"{w}.time_index[{j}]")
            if not isinstance(s, str) or s not in common.TL_IDS:
                common.fail(path, f"{w}.state[{j}]", f"{s!r} is not a light state ({', '.join(common.TL_IDS)})")
            if 0 <= step < t:
                arr[step] = common.TL_IDS[s]
        lane_ids = value.get("lane_id")
        if lane_ids:
            tl[_integer(_list(lane_ids, path, f"{w}.lane_id")[0], path, f"{w}.lane_id[0]")] = arr
        else:
            try:
                tl[int(key)] = arr
            except ValueError:
                common.fail(path, w, "lane id is not an integer")
    return tl


def read(path: str, decimate_tol: float = 0.1,
         max_segment: float = common.MAX_SEGMENT) -> tuple[RawScene, common.ReadNotes]:
    """Read one JSON scene file -> (RawScene, notes); road segments <= max_segment m. Raises SceneError
    naming file and field."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, nesting too deep
        common.fail(path, "<file>", f"not valid JSON: {type(e).__name__}: {e}")
    except OSError as e:
        common.fail(path, "<file>", f"cannot read: {e}")
    try:
        parts = parse(data, path)
    except (TypeError, AttributeError, ValueError, KeyError) as e:  # a value of the wrong kind somewhere
        if isinstance(e, common.SceneError):
            raise
        common.fail(path, "<structure>", f"a field has the wrong type: {type(e).__name__}: {e}")
    return common.assemble(parts, decimate_tol, max_segment)
