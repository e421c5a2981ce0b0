"""Shared by every real-data reader: from parsed arrays to a validated RawScene.

A reader parses its file format into `SceneParts` (polylines with type names and map ids, object
arrays, traffic-light states by lane id) and calls `assemble`, which applies the validation rules
below (`validate`), decimates polylines, builds the lane graph (the data has no connectivity) and
plans each object's lane route. Every rejection raises `SceneError` naming the file and the field;
every repair is counted in `ReadNotes` (returned beside the scene), every coercion listed in
`ReadNotes.coerced` (rules: `COERCIONS`).

Validation rules (each has a test in tests/test_readers.py or tests/test_bad_scene_input.py):
  R0 a value of the wrong JSON type      -> reject, naming the value (objects[1].valid[4]: 'false' is a
     (the JSON reader: at every step)       string): numbers must be JSON numbers, flags JSON booleans
                                            or 0/1 (coercion 'valid_as_number'), names strings
  R1 missing required field             -> reject (SceneError names the field)
  R2 NaN / inf in an object's valid step -> reject (names object index, field and step)
     NaN / inf in a road polyline        -> reject (names road index and vertex)
  R3 polyline with < 2 distinct points   -> dropped and counted (stop signs, which are single points
                                            in the data, become a 1 m segment along the nearest lane)
  R4 object never valid                  -> dropped and counted
  R5 no controllable vehicle             -> reject ("no controllable vehicle")
  R6 log shorter than the episode        -> reject when the scene is built with a SimConfig whose
                                            log_steps is longer (builder: field 'log_steps')
  R7 value out of bounds                 -> reject, naming the value: a valid step's position, a goal
                                            or a road vertex beyond ±COORD_LIMIT m, a valid step's
                                            velocity beyond ±SPEED_LIMIT m/s or heading beyond
                                            ±HEADING_LIMIT, a length or width outside (0, SIZE_LIMIT] m
  R8 log shorter than MIN_LOG_STEPS      -> reject ("log has 1 step", field 'log_steps')
  R9 roads needing more than MAX_ROAD_POINTS vertices once split into max_segment pieces -> reject
Values at invalid steps are never used (placeholders, e.g. -10000 or NaN, are zeroed), so R2 and R7
look at valid steps only. Controllable = a vehicle valid at its first step that moves >= 2 m over the log
("parked" otherwise; parked objects stay in the world as log-replayed obstacles).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from cp_jax.scenarios.builder import SceneError
from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import types

ROAD_TYPE_IDS = {
    "lane": types.LANE, "road_edge": types.ROAD_EDGE, "road_line": types.ROAD_LINE,
    "crosswalk": types.CROSSWALK, "stop_sign": types.STOP_SIGN, "speed_bump": types.SPEED_BUMP,
    "driveway": types.DRIVEWAY,
}
OBJECT_TYPE_IDS = {"vehicle": types.VEHICLE, "pedestrian": types.PEDESTRIAN, "cyclist": types.CYCLIST}
TL_IDS = {
    "unknown": types.TL_NONE, "stop": types.TL_STOP, "arrow_stop": types.TL_STOP,
    "caution": types.TL_CAUTION, "arrow_caution": types.TL_CAUTION, "flashing_stop": types.TL_STOP,
    "flashing_caution": types.TL_CAUTION, "go": types.TL_GO, "arrow_go": types.TL_GO,
}
PARKED_DISPLACEMENT = 2.0  # m over the whole log
COORD_LIMIT = 1e6  # m: |x|, |y| of valid object steps, goals and road vertices (WOMD scenes: < 2e4)
SPEED_LIMIT = 1e3  # m/s: |velocity x|, |y| at a valid step
HEADING_LIMIT = 1e5  # |heading| at a valid step, radians or (unwrapped) degrees
SIZE_LIMIT = 100.0  # m: length and width of an object ever valid
MIN_LOG_STEPS = 2  # a log needs two steps to move
MAX_ROAD_POINTS = 5_000_000  # road vertices of a scene once split into max_segment pieces (80 MB)
COERCIONS = {  # what a reader may coerce (ReadNotes.coerced: rule -> object indices in the file)
    "valid_as_number": "valid flags given as 0/1 numbers, read as false/true",
    "partial_goal": "a goalPosition with one coordinate null or missing: the final valid position is the goal",
    "missing_goal": "no goalPosition (missing or null, or both coordinates null): the final valid position is the goal",
    "nonfinite_goal": "a goalPosition with a NaN or infinite coordinate: the final valid position is the goal",
    "other_type": "a type other than vehicle / pedestrian / cyclist: read as 'other' (never controllable)",
}


@dataclasses.dataclass
class SceneParts:
    """A scene as parsed from a file, before validation. N objects, T steps."""

    name: str  # file path or scenario id, used in every error message
    polylines: list[tuple[str, np.ndarray, int]]  # (type name, [n, 2], map id or -1)
    xy: np.ndarray  # [N, T, 2]
    yaw: np.ndarray  # [N, T] radians
    vel: np.ndarray  # [N, T, 2]
    valid: np.ndarray  # [N, T] bool
    size: np.ndarray  # [N, 2] (length, width)
    obj_type: list[str]  # [N] type names
    goal: np.ndarray | None = None  # [N, 2]; None -> final valid position
    tl: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # lane map id -> [T] TL_* ids
    sdc: int = -1  # -1: unknown (the first controllable vehicle is used)
    object_ids: np.ndarray | None = None  # [N] ids from the file, for reports
    coerced: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # COERCIONS key -> object indices


@dataclasses.dataclass
class ReadNotes:
    """What a reader repaired or dropped in one scene (for report.json)."""

    dropped_polylines: int = 0
    dropped_objects: int = 0
    heading_unit: str = "rad"
    segments_before_decimation: int = 0
    segments_after_decimation: int = 0
    coerced: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # COERCIONS key -> object indices

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def fail(name: str, field: str, why: str):
    raise SceneError(f"{name}: field {field!r}: {why}")


MAX_SEGMENT = 10.0  # m: road polylines are split into segments no longer than this (`decimate`)


def decimate(poly: np.ndarray, tol: float = 0.1, max_len: float = MAX_SEGMENT) -> np.ndarray:
    """Ramer-Douglas-Peucker simplification [n, 2] -> [m, 2] (endpoints kept), then split any
    segment longer than max_len so grid queries stay local."""
    n = len(poly)
    if n <= 2:
        keep = np.ones(n, bool)
    else:
        keep = np.zeros(n, bool)
        keep[0] = keep[-1] = True
        stack = [(0, n - 1)]
        while stack:
            i, j = stack.pop()
            if j <= i + 1:
                continue
            a, b = poly[i], poly[j]
            ab = b - a
            norm = np.linalg.norm(ab)
            rel = poly[i + 1 : j] - a
            # Distance to the segment (not the infinite chord: a polyline that doubles back
            # along the chord must keep its turning point).
            t = np.clip(rel @ ab / max(norm * norm, 1e-18), 0.0, 1.0)
            d = np.linalg.norm(rel - t[:, None] * ab, axis=1)
            k = int(np.argmax(d))
            if d[k] > tol:
                keep[i + 1 + k] = True
                stack += [(i, i + 1 + k), (i + 1 + k, j)]
    out = poly[keep]
    pieces = [out[:1]]
    for a, b in zip(out[:-1], out[1:], strict=True):
        m = max(1, int(np.ceil(np.linalg.norm(b - a) / max_len)))
        pieces.append(a + (b - a) * (np.arange(1, m + 1) / m)[:, None])
    return np.concatenate(pieces)


def heading_unit(yaw: np.ndarray, xy: np.ndarray, valid: np.ndarray) -> str:
    """'rad' or 'deg': which reading of yaw [N, T] matches the direction of motion best."""
    errs = {"rad": [], "deg": []}
    step = np.diff(xy, axis=1)
    ok = valid[:, 1:] & valid[:, :-1] & (np.linalg.norm(step, axis=-1) > 0.3)
    if ok.sum() >= 3:
        motion = np.arctan2(step[..., 1], step[..., 0])[ok]
        for unit, scale in (("rad", 1.0), ("deg", np.pi / 180)):
            diff = yaw[:, :-1][ok] * scale - motion
            errs[unit] = np.abs(np.arctan2(np.sin(diff), np.cos(diff)))
        return "rad" if np.median(errs["rad"]) <= np.median(errs["deg"]) else "deg"
    return "deg" if np.abs(yaw[valid]).max(initial=0.0) > 2 * np.pi + 0.5 else "rad"


def _unit(v):
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-9)


def lane_graph(lanes: list[np.ndarray], join_tol: float = 0.5, max_turn_deg: float = 60.0):
    """Successors (end of i within join_tol of the start of j, heading change < max_turn_deg) and
    left / right neighbours (same direction, 2.5-5 m to the side at the lane's middle)."""
    n = len(lanes)
    starts = np.array([p[0] for p in lanes])
    ends = np.array([p[-1] for p in lanes])
    head_in = np.array([np.arctan2(*(_unit(p[1] - p[0])[::-1])) for p in lanes])
    head_out = np.array([np.arctan2(*(_unit(p[-1] - p[-2])[::-1])) for p in lanes])
    succ = [[] for _ in range(n)]
    d = np.linalg.norm(ends[:, None] - starts[None], axis=-1)
    turn = np.abs(np.angle(np.exp(1j * (head_in[None, :] - head_out[:, None]))))
    for i, j in zip(*np.nonzero((d < join_tol) & (turn < np.radians(max_turn_deg))), strict=True):
        if i != j:
            succ[i].append(int(j))
    for i in range(n):  # keep the closest few
        succ[i] = sorted(succ[i], key=lambda j, i=i: d[i, j])[:4]

    mids, mid_dir = [], []
    for p in lanes:
        k = len(p) // 2
        mids.append(0.5 * (p[max(k - 1, 0)] + p[k]) if len(p) > 2 else 0.5 * (p[0] + p[-1]))
        mid_dir.append(_unit(p[min(k, len(p) - 1)] - p[max(k - 1, 0)]))
    left, right = [-1] * n, [-1] * n
    pts = np.concatenate(lanes)
    owner = np.concatenate([np.full(len(p), j) for j, p in enumerate(lanes)])
    dirs = np.concatenate([_unit(np.gradient(p, axis=0)) for p in lanes])
    for i in range(n):
        c, u = mids[i], mid_dir[i]
        normal = np.array([-u[1], u[0]])
        rel = pts - c
        lon, lat = rel @ u, rel @ normal
        ok = (owner != i) & (np.abs(lon) < 2.0) & (np.abs(lat) > 2.5) & (np.abs(lat) < 5.0)
        ok &= dirs @ u > np.cos(np.radians(30))
        for side, out in ((1, left), (-1, right)):
            cand = ok & (np.sign(lat) == side)
            if cand.any():
                out[i] = int(owner[np.flatnonzero(cand)[np.argmin(np.abs(lat[cand]))]])
    return succ, left, right


def nearest_lane(lanes: list[np.ndarray], xy: np.ndarray, yaw: float | None, max_dist: float = 4.0) -> int:
    """Lane whose centreline passes nearest xy (heading within 60 deg when yaw is given), or -1."""
    best, best_d = -1, max_dist
    h = None if yaw is None else np.array([np.cos(yaw), np.sin(yaw)])
    for i, p in enumerate(lanes):
        a, b = p[:-1], p[1:]
        ab = b - a
        t = np.clip(np.sum((xy - a) * ab, 1) / np.maximum(np.sum(ab * ab, 1), 1e-12), 0, 1)
        dist = np.linalg.norm(a + t[:, None] * ab - xy, axis=1)
        k = int(np.argmin(dist))
        if dist[k] < best_d and (h is None or _unit(ab[k]) @ h > 0.5):
            best, best_d = i, dist[k]
    return best


def plan_route(succ: list[list[int]], start: int, goal: int, max_lanes: int = 12) -> list[int]:
    """Shortest lane sequence start -> goal along successors (BFS), [] if none within max_lanes."""
    if start < 0 or goal < 0:
        return []
    prev = {start: -1}
    queue = collections.deque([start])
    while queue:
        lane = queue.popleft()
        if lane == goal:
            route = [lane]
            while prev[route[-1]] >= 0:
                route.append(prev[route[-1]])
            return route[::-1][:max_lanes]
        for nxt in succ[lane]:
            if nxt not in prev:
                prev[nxt] = lane
                queue.append(nxt)
    return []


def validate(parts: SceneParts) -> None:
    """Refuse SceneParts no scene can hold (rules R2, R7-R9 of the module docstring; R9 is checked
    while splitting, in `assemble`). Raises SceneError naming the file, the field and the value."""
    name = parts.name
    n, t = parts.valid.shape
    if t < MIN_LOG_STEPS:
        fail(name, "log_steps", f"log has {t} step{'' if t == 1 else 's'}; a scene needs >= {MIN_LOG_STEPS}")
    for field, arr, shape in (("position", parts.xy, (n, t, 2)), ("heading", parts.yaw, (n, t)),
                              ("velocity", parts.vel, (n, t, 2)), ("size", parts.size, (n, 2))):
        if arr.shape != shape:
            fail(name, field, f"shape {arr.shape}, expected {shape}")
    for field, arr, limit, unit in (("position", parts.xy, COORD_LIMIT, "m"), ("heading", parts.yaw, HEADING_LIMIT, ""),
                                    ("velocity", parts.vel, SPEED_LIMIT, "m/s")):
        mask = parts.valid if arr.ndim == 2 else parts.valid[..., None]
        _check_values(name, field, arr, mask, limit, unit)
    ever = parts.valid.any(1)
    for j, field in enumerate(("length", "width")):
        v = parts.size[:, j]
        bad = ever & ~((v > 0) & (v <= SIZE_LIMIT))  # NaN fails both
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            fail(name, f"objects[{i}].{field}", f"{v[i]:g} is outside (0, {SIZE_LIMIT:g}] m")
    if parts.goal is not None:
        goal = np.asarray(parts.goal, np.float64)
        bad = ever[:, None] & np.isfinite(goal) & (np.abs(goal) > COORD_LIMIT)  # non-finite: no goal
        if bad.any():
            i, c = (int(v) for v in np.argwhere(bad)[0])
            fail(name, f"objects[{i}].goalPosition.{'xy'[c]}", f"{goal[i, c]:g} is outside ±{COORD_LIMIT:g} m")
    for k, (_, poly, _) in enumerate(parts.polylines):
        poly = np.asarray(poly, np.float64).reshape(-1, 2)
        _check_values(name, f"roads[{k}].geometry", poly, np.ones_like(poly, bool), COORD_LIMIT, "m")


def _check_values(name: str, field: str, arr: np.ndarray, mask: np.ndarray, limit: float, unit: str) -> None:
    """Fail on the first non-finite or out-of-bounds entry of arr [N, T] / [N, T, 2] / [P, 2] under mask
    (same shape), naming it as objects[i].field[k].x or field[p].x."""
    bad_finite = ~np.isfinite(arr) & mask
    bad_bound = np.isfinite(arr) & (np.abs(arr) > limit) & mask
    for bad, why in ((bad_finite, "non-finite value {value:g} ({count} in all)"),
                     (bad_bound, f"{{value:g}} is outside ±{limit:g}{' ' + unit if unit else ''} ({{count}} in all)")):
        if bad.any():
            idx = tuple(int(v) for v in np.argwhere(bad)[0])
            if field.startswith("roads"):  # [P, 2]: vertex p, coordinate c
                where = f"{field}[{idx[0]}].{'xy'[idx[1]]}"
            else:  # [N, T(, 2)]: object i, step k (, coordinate c)
                where = f"objects[{idx[0]}].{field}[{idx[1]}]" + (f".{'xy'[idx[2]]}" if len(idx) > 2 else "")
            fail(name, where, why.format(value=float(arr[idx]), count=int(bad.sum())))


def assemble(parts: SceneParts, decimate_tol: float = 0.1,
             max_segment: float = MAX_SEGMENT) -> tuple[RawScene, ReadNotes]:
    """Validate SceneParts and turn them into a RawScene (rules R1-R9 of the module docstring); road
    polylines are simplified within decimate_tol (m) and split into segments <= max_segment (m)."""
    validate(parts)
    name = parts.name
    notes = ReadNotes(coerced={k: list(v) for k, v in parts.coerced.items()})
    n, t = parts.valid.shape
    ever = parts.valid.any(1)

    # Road polylines: drop degenerate ones (R3), decimate the rest.
    lanes, dense_lanes, lane_ids, edges, others = [], [], [], [], []
    stop_points, points = [], 0
    for k, (kind, poly, map_id) in enumerate(parts.polylines):
        if kind not in ROAD_TYPE_IDS:
            fail(name, f"roads[{k}].type", f"unknown road type {kind!r}")
        poly = np.asarray(poly, np.float64).reshape(-1, 2)  # finite and in bounds (validate)
        keep = np.concatenate([[True], np.linalg.norm(np.diff(poly, axis=0), axis=1) > 1e-3]) if len(poly) else []
        poly = poly[keep] if len(poly) else poly
        if kind == "stop_sign" and len(poly) >= 1:
            stop_points.append(poly[0])
            continue
        if len(poly) < 2:
            notes.dropped_polylines += 1
            continue
        notes.segments_before_decimation += len(poly) - 1
        span = np.linalg.norm(np.diff(poly, axis=0), axis=1)
        points += len(poly) + int(np.ceil(span / max_segment).sum())  # >= what decimate returns (R9)
        if points > MAX_ROAD_POINTS:
            fail(name, f"roads[{k}].geometry", f"splitting the roads into <= {max_segment:g} m segments needs "
                 f"> {MAX_ROAD_POINTS} vertices (this polyline spans {span.sum():g} m)")
        dense = poly
        poly = decimate(poly, decimate_tol, max_segment)
        notes.segments_after_decimation += len(poly) - 1
        if kind == "lane":
            lanes.append(poly)
            dense_lanes.append(dense)
            lane_ids.append(map_id)
        elif kind == "road_edge":
            edges.append(poly)
        else:
            others.append((ROAD_TYPE_IDS[kind], poly))
    for p in stop_points:  # a 1 m segment along the nearest lane's direction
        j = nearest_lane(lanes, p, None, max_dist=30.0) if lanes else -1
        direction = _unit(lanes[j][-1] - lanes[j][0]) if j >= 0 else np.array([1.0, 0.0])
        others.append((types.STOP_SIGN, np.stack([p - 0.5 * direction, p + 0.5 * direction])))
        notes.segments_after_decimation += 1
    if not lanes:
        fail(name, "roads", "no lane polylines")

    # Objects: drop never-valid ones (R4).
    keep = np.flatnonzero(ever)
    notes.dropped_objects = int(n - len(keep))
    if len(keep) == 0:
        fail(name, "objects", "no object is ever valid")
    sdc = parts.sdc
    xy, yaw, vel, valid = parts.xy[keep], parts.yaw[keep], parts.vel[keep], parts.valid[keep]
    xy = np.where(valid[..., None], xy, 0.0)
    vel = np.where(valid[..., None], vel, 0.0)
    yaw = np.where(valid, yaw, 0.0)
    unit = heading_unit(yaw, xy, valid)
    notes.heading_unit = unit
    if unit == "deg":
        yaw = np.radians(yaw)
    yaw = np.arctan2(np.sin(yaw), np.cos(yaw))
    obj_type = np.array([OBJECT_TYPE_IDS.get(parts.obj_type[i], types.OTHER_OBJECT) for i in keep], np.int32)
    first = np.argmax(valid, axis=1)
    last = valid.shape[1] - 1 - np.argmax(valid[:, ::-1], axis=1)
    final_xy = xy[np.arange(len(keep)), last]
    goal = final_xy if parts.goal is None else np.asarray(parts.goal, np.float64)[keep]
    goal = np.where(np.isfinite(goal).all(-1, keepdims=True), goal, final_xy)  # both coordinates or neither
    start_xy = xy[np.arange(len(keep)), first]
    moved = np.linalg.norm(final_xy - start_xy, axis=-1)
    controllable = (obj_type == types.VEHICLE) & (moved >= PARKED_DISPLACEMENT) & valid[:, 0]
    if not controllable.any():
        fail(name, "objects", "no controllable vehicle (a vehicle valid at t=0 that moves >= 2 m)")
    remap = {int(old): new for new, old in enumerate(keep)}
    sdc = remap.get(int(sdc), -1)
    if sdc < 0:  # unknown (or never valid): the first controllable vehicle stands in
        sdc = int(np.flatnonzero(controllable)[0])

    # Lane graph, traffic lights, routes.
    succ, left, right = lane_graph(dense_lanes)  # neighbours need the dense points (same indices)
    index_of = {mid: i for i, mid in enumerate(lane_ids) if mid >= 0}
    tl_state = None
    if parts.tl:
        tl_state = np.zeros((len(lanes), t), np.int32)
        for map_id, states in parts.tl.items():
            if map_id in index_of:
                tl_state[index_of[map_id], : len(states)] = states[:t]
    routes = []
    for i in range(len(keep)):
        if not controllable[i]:
            routes.append([])
            continue
        s_lane = nearest_lane(lanes, start_xy[i], yaw[i, first[i]])
        g_lane = nearest_lane(lanes, goal[i], yaw[i, last[i]])
        routes.append(plan_route(succ, s_lane, g_lane))
    raw = RawScene(
        name=name, lanes=lanes, lane_succ=succ, lane_left=left, lane_right=right, edges=edges,
        others=others, log_xy=xy, log_yaw=yaw, log_vel=vel, log_valid=valid,
        size=np.asarray(parts.size, np.float64)[keep], obj_type=obj_type, goal=goal,
        controllable=controllable, routes=routes, priority=None, tl_state=tl_state, sdc=sdc,
        object_ids=(np.arange(n) if parts.object_ids is None else np.asarray(parts.object_ids))[keep],
    )
    return raw, notes
