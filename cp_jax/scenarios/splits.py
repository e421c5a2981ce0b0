"""Evaluation splits: (scene, ego) pairs, an interactivity score, and the Interactive / Random splits.

Runs once, offline, in numpy (never inside jit). A *pair* is one scene with one eligible ego; the
*Interactive* split is the top-N pairs by `interactivity`, the *Random* split a seeded sample.

Ego eligibility (`eligible_egos`, BehaviorBench protocol): a vehicle (`types.VEHICLE`), length >= 3 m,
controllable, valid at t = 0, straight-line distance start (logged position at t = 0) -> goal >= 10 m,
in a scene with >= 3 objects valid at t = 0 (the ego included).

Interactivity score (`interactivity`), per ego, exactly the protocol's formula

    s = [0.30 min(crossings / 4, 1) + 0.15 min(sum_j w_j |d_accel_j| / 60, 1)
         + 0.15 min(sum_j w_j |d_steer_j| / 0.1, 1) + 0.20 min(#steps with TTC < 3 s / 60, 1)
         + 0.10 min(#agents within 40 m at t0 / 10, 1) + 0.10 min((goal_dist - 10) / 100, 1)] * lane_mult
    w_j = 1 / max(dist(ego, j), 1)

with every term clamped to [0, 1] (so s is in [0, 1]) and the parts the formula leaves open defined
as follows ("others" = every object in the scene but the ego, whatever its type, parked included):

- paths: an object's logged path is the polyline of its positions at valid log steps; a segment
  joins steps k and k+1 only when both are valid (no segment bridges a gap in the log).
- crossings: number of others whose path crosses the ego's path, each counted once. A segment of
  one path crosses a segment of the other when each one's endpoints lie on opposite sides of (or
  on) the other's line AND their lines meet at >= 20 degrees (MIN_CROSSING_DEG). Collinear,
  near-parallel and zero-length segments never count, so a car following the ego in its lane (whose
  noisy logged path weaves across the ego's at a degree or two) or a parked car is not a crossing.
  Measured on the 20 shared WOMD scenes (171 eligible egos): of 147 (ego, other) paths that touch
  at all, 127 meet only at < 10 degrees (same-lane followers), 2 at 13.5 degrees, 18 at 26.5-84.
- d_accel_j: sum over log steps of |a_{k+1} - a_k| (m/s^2), where a_k = (v_{k+1} - v_k) / dt is the
  longitudinal acceleration from the logged velocity projected on the logged heading, dt = 0.1 s;
  only terms whose three steps k..k+2 are all valid are summed.
- d_steer_j: the same with the yaw rate r_k = wrap(yaw_{k+1} - yaw_k) / dt (rad/s) in place of a_k.
  The logs carry no steering angle: the yaw rate is a proxy for it.
- dist(ego, j): minimum centre-to-centre distance over the steps where both are valid; an object
  never valid together with the ego has w_j = 0 (it cannot have interacted with it).
- TTC: at each step where the ego is valid, for every other object valid at that step, along the
  line of relative position u = (p_j - p_ego) / |p_j - p_ego|: closing speed c = (v_ego - v_j) . u;
  if c > 0, TTC = max(|p_j - p_ego| - (length_ego + length_j) / 2, 0) / c (logged velocities).
  A step counts when the minimum TTC over the others is < 3 s.
- density: others valid at t = 0 within 40 m (centre to centre) of the ego at t = 0.
- goal_dist: straight-line distance from the ego's position at t = 0 to its goal.
- lane_mult = 0.5 when the goal lies on the ego's own chained lane: the start lane (`nearest_lane`
  to the ego at t = 0, with its heading) and the goal lane (`nearest_lane` to the goal, with the
  ego's heading at its last valid step) are joined by a chain of successors (`RawScene.lane_succ`;
  the same lane counts) along which the lane direction never turns by 30 degrees or more from its
  direction at the ego's start (on the start lane only the part ahead of the ego, on the goal lane
  only the part before the goal are checked): a straight-on continuation, no lane change, no turn.
  Otherwise (no such chain, or the start or goal is off every lane) lane_mult = 1.

Splits are lists of `Pair(scene_id, ego, score)`. When fewer pairs exist than were asked for, a
split returns all of them and says so in its `warning` attribute (a `Split` is a list with
`requested` and `warning` fields); it never raises. Manifests are CSV files with the header
`scene_id,ego,score` (score written with 6 decimals).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from cp_jax.scenarios.raw import RawScene
from cp_jax.scenarios.readers.common import nearest_lane
from cp_jax.sim import types

DT = 0.1  # s per log step
MIN_LENGTH = 3.0  # m
MIN_GOAL_DIST = 10.0  # m
MIN_AGENTS_T0 = 3
TTC_THRESHOLD = 3.0  # s
DENSITY_RADIUS = 40.0  # m
STRAIGHT_ON_DEG = 30.0
MIN_CROSSING_DEG = 20.0  # paths meeting at a shallower angle are followers / noise, not crossings

# (name, weight, normaliser) of the six terms, in the formula's order.
TERMS = (
    ("crossings", 0.30, 4.0),
    ("accel_change", 0.15, 60.0),
    ("steer_change", 0.15, 0.1),
    ("ttc_steps", 0.20, 60.0),
    ("density", 0.10, 10.0),
    ("goal_dist", 0.10, 100.0),
)
MANIFEST_HEADER = ("scene_id", "ego", "score")


class Pair(NamedTuple):
    scene_id: str
    ego: int
    score: float


class Split(list):
    """A list of Pairs; `requested` is the n asked for, `warning` is '' unless fewer were available."""

    def __init__(self, pairs=(), requested: int = 0, warning: str = ""):
        super().__init__(pairs)
        self.requested = requested
        self.warning = warning


# ----------------------------------------------------------------------------------------------
# Eligibility


def eligible_egos(raw: RawScene) -> np.ndarray:
    """Indices (int64, ascending) of the objects that may be the ego of a pair (module docstring)."""
    valid0 = np.asarray(raw.log_valid[:, 0], bool)
    if valid0.sum() < MIN_AGENTS_T0:
        return np.zeros(0, np.int64)
    goal_dist = np.linalg.norm(np.asarray(raw.goal, np.float64) - raw.log_xy[:, 0], axis=-1)
    ok = (
        (np.asarray(raw.obj_type) == types.VEHICLE)
        & (np.asarray(raw.size, np.float64)[:, 0] >= MIN_LENGTH)
        & np.asarray(raw.controllable, bool)
        & valid0
        & (goal_dist >= MIN_GOAL_DIST)
    )
    return np.flatnonzero(ok).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# Per-scene quantities shared by every ego of a scene


@dataclasses.dataclass
class _SceneStats:
    seg_a: list[np.ndarray]  # per object, path segment starts [m_i, 2]
    seg_b: list[np.ndarray]  # per object, path segment ends [m_i, 2]
    box_lo: np.ndarray  # [N, 2] path bounding boxes (inf / -inf for no segment)
    box_hi: np.ndarray
    accel_change: np.ndarray  # [N] sum |change of longitudinal acceleration|, m/s^2
    steer_change: np.ndarray  # [N] sum |change of yaw rate|, rad/s


def _wrap(a):
    return np.arctan2(np.sin(a), np.cos(a))


def _sum_abs_second_diff(x: np.ndarray, valid: np.ndarray, wrap: bool = False) -> np.ndarray:
    """[N, T] -> [N]: sum over k of |r_{k+1} - r_k|, r_k = (x_{k+1} - x_k)/dt, steps k..k+2 valid."""
    d = np.diff(x, axis=1)
    if wrap:
        d = _wrap(d)
    rate = d / DT
    change = np.abs(np.diff(rate, axis=1))
    ok = valid[:, :-2] & valid[:, 1:-1] & valid[:, 2:]
    return np.where(ok, change, 0.0).sum(1)


def _scene_stats(raw: RawScene) -> _SceneStats:
    xy = np.asarray(raw.log_xy, np.float64)
    valid = np.asarray(raw.log_valid, bool)
    yaw = np.asarray(raw.log_yaw, np.float64)
    vel = np.asarray(raw.log_vel, np.float64)
    xy = np.where(valid[..., None], xy, 0.0)
    seg_a, seg_b = [], []
    n = xy.shape[0]
    lo, hi = np.full((n, 2), np.inf), np.full((n, 2), -np.inf)
    both = valid[:, :-1] & valid[:, 1:]
    for i in range(n):
        k = np.flatnonzero(both[i])
        seg_a.append(xy[i, k])
        seg_b.append(xy[i, k + 1])
        if len(k):
            pts = np.concatenate([seg_a[-1], seg_b[-1]])
            lo[i], hi[i] = pts.min(0), pts.max(0)
    v_lon = vel[..., 0] * np.cos(yaw) + vel[..., 1] * np.sin(yaw)
    v_lon = np.where(valid, v_lon, 0.0)
    yaw = np.where(valid, yaw, 0.0)
    if xy.shape[1] >= 3:
        accel = _sum_abs_second_diff(v_lon, valid)
        steer = _sum_abs_second_diff(yaw, valid, wrap=True)
    else:
        accel = steer = np.zeros(n)
    return _SceneStats(seg_a, seg_b, lo, hi, accel, steer)


# ----------------------------------------------------------------------------------------------
# Geometry helpers


def _cross(u, v):
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def paths_intersect(a0, a1, b0, b1, min_angle_deg: float = MIN_CROSSING_DEG) -> bool:
    """Whether any segment a0[i]->a1[i] crosses any segment b0[j]->b1[j] (arrays [m, 2]) at an
    angle >= min_angle_deg between their lines.

    Endpoints on the other segment's line count (touching); collinear, near-parallel and zero-length
    segments do not.
    """
    if len(a0) == 0 or len(b0) == 0:
        return False
    a0, a1 = a0[:, None], a1[:, None]
    b0, b1 = b0[None], b1[None]
    da, db = a1 - a0, b1 - b0
    d1, d2 = _cross(da, b0 - a0), _cross(da, b1 - a0)
    d3, d4 = _cross(db, a0 - b0), _cross(db, a1 - b0)
    lab = np.linalg.norm(da, axis=-1) * np.linalg.norm(db, axis=-1)
    steep = np.abs(_cross(da, db)) >= np.sin(np.radians(min_angle_deg)) * lab
    hit = (d1 * d2 <= 0) & (d3 * d4 <= 0) & steep & (lab > 1e-12)
    return bool(hit.any())


def _project(poly: np.ndarray, xy: np.ndarray) -> tuple[int, float]:
    """(segment index, fraction along it) of the point of polyline poly nearest xy."""
    a, b = poly[:-1], poly[1:]
    ab = b - a
    t = np.clip(np.sum((xy - a) * ab, 1) / np.maximum(np.sum(ab * ab, 1), 1e-12), 0, 1)
    dist = np.linalg.norm(a + t[:, None] * ab - xy, axis=1)
    k = int(np.argmin(dist))
    return k, float(t[k])


def _seg_headings(poly: np.ndarray) -> np.ndarray:
    d = np.diff(poly, axis=0)
    return np.arctan2(d[:, 1], d[:, 0])


def _within(headings: np.ndarray, ref: float, tol: float) -> bool:
    return bool(np.all(np.abs(_wrap(headings - ref)) < tol)) if len(headings) else True


def goal_on_own_lane(raw: RawScene, ego: int) -> bool:
    """Whether the ego's goal lies on its own chained lane (definition in the module docstring)."""
    if not raw.lanes:
        return False
    valid = np.asarray(raw.log_valid[ego], bool)
    if not valid.any():
        return False
    first = int(np.argmax(valid))
    last = len(valid) - 1 - int(np.argmax(valid[::-1]))
    start_xy = np.asarray(raw.log_xy[ego, first], np.float64)
    goal_xy = np.asarray(raw.goal[ego], np.float64)
    s_lane = nearest_lane(raw.lanes, start_xy, float(raw.log_yaw[ego, first]))
    g_lane = nearest_lane(raw.lanes, goal_xy, float(raw.log_yaw[ego, last]))
    if s_lane < 0 or g_lane < 0:
        return False
    tol = np.radians(STRAIGHT_ON_DEG)
    s_poly = np.asarray(raw.lanes[s_lane], np.float64)
    g_poly = np.asarray(raw.lanes[g_lane], np.float64)
    s_head = _seg_headings(s_poly)
    g_head = _seg_headings(g_poly)
    s_k, _ = _project(s_poly, start_xy)
    g_k, _ = _project(g_poly, goal_xy)
    ref = float(s_head[s_k])
    if s_lane == g_lane:  # only the stretch between the two projections
        lo, hi = sorted((s_k, g_k))
        return _within(s_head[lo : hi + 1], ref, tol)
    if not _within(s_head[s_k:], ref, tol) or not _within(g_head[: g_k + 1], ref, tol):
        return False
    # BFS through successors whose whole centreline stays within tol of the start direction.
    seen = {s_lane}
    queue = collections.deque([s_lane])
    while queue:
        lane = queue.popleft()
        for nxt in raw.lane_succ[lane]:
            if nxt in seen:
                continue
            seen.add(nxt)
            if nxt == g_lane:
                return True
            if _within(_seg_headings(np.asarray(raw.lanes[nxt], np.float64)), ref, tol):
                queue.append(nxt)
    return False


# ----------------------------------------------------------------------------------------------
# Interactivity


def interactivity(raw: RawScene, ego: int) -> dict:
    """The interactivity score of one ego and its parts (definitions in the module docstring).

    Returns raw counts / sums (`crossings`, `accel_change`, `steer_change`, `ttc_steps`, `density`,
    `goal_dist`), each term after normalising and clamping (`term_<name>`, in [0, 1]), `lane_mult`
    and the total `score` in [0, 1].
    """
    return _interactivity(raw, int(ego), _scene_stats(raw))


def _interactivity(raw: RawScene, ego: int, stats: _SceneStats) -> dict:
    xy = np.asarray(raw.log_xy, np.float64)
    vel = np.asarray(raw.log_vel, np.float64)
    valid = np.asarray(raw.log_valid, bool)
    length = np.asarray(raw.size, np.float64)[:, 0]
    n = xy.shape[0]
    others = np.array([j for j in range(n) if j != ego], np.int64)

    # Crossings (bounding boxes first).
    crossings = 0
    lo, hi = stats.box_lo[ego], stats.box_hi[ego]
    for j in others:
        if np.any(stats.box_lo[j] > hi) or np.any(stats.box_hi[j] < lo):
            continue
        if paths_intersect(stats.seg_a[ego], stats.seg_b[ego], stats.seg_a[j], stats.seg_b[j]):
            crossings += 1

    # Proximity weights.
    common = valid[others] & valid[ego][None]  # [M, T]
    dist = np.linalg.norm(xy[others] - xy[ego][None], axis=-1)  # [M, T]
    min_dist = np.where(common, dist, np.inf).min(1, initial=np.inf)
    w = np.where(np.isfinite(min_dist), 1.0 / np.maximum(min_dist, 1.0), 0.0)
    accel_change = float(np.sum(w * stats.accel_change[others]))
    steer_change = float(np.sum(w * stats.steer_change[others]))

    # TTC along the line of relative position.
    rel = xy[others] - xy[ego][None]
    u = rel / np.maximum(dist, 1e-9)[..., None]
    closing = np.sum((vel[ego][None] - vel[others]) * u, axis=-1)
    gap = np.maximum(dist - 0.5 * (length[ego] + length[others])[:, None], 0.0)
    ttc = np.where(common & (closing > 0), gap / np.maximum(closing, 1e-9), np.inf)
    ttc_steps = int(np.sum(ttc.min(0, initial=np.inf) < TTC_THRESHOLD)) if len(others) else 0

    density = int(np.sum(common[:, 0] & (dist[:, 0] <= DENSITY_RADIUS))) if len(others) else 0
    goal_dist = float(np.linalg.norm(np.asarray(raw.goal[ego], np.float64) - xy[ego, 0]))
    lane_mult = 0.5 if goal_on_own_lane(raw, ego) else 1.0

    values = {
        "crossings": crossings,
        "accel_change": accel_change,
        "steer_change": steer_change,
        "ttc_steps": ttc_steps,
        "density": density,
        "goal_dist": goal_dist,
    }
    out = dict(values)
    total = 0.0
    for name, weight, norm in TERMS:
        x = float(values[name]) - (MIN_GOAL_DIST if name == "goal_dist" else 0.0)
        term = float(np.clip(x / norm, 0.0, 1.0)) if np.isfinite(x) else 0.0
        out[f"term_{name}"] = term
        total += weight * term
    out["lane_mult"] = lane_mult
    out["score"] = float(np.clip(total * lane_mult, 0.0, 1.0))
    return out


def score_scenes(raws: Sequence[RawScene], scene_ids: Sequence[str] | None = None) -> list[Pair]:
    """Pairs (scene_id, ego, score) for every eligible ego of every scene, in input order.

    scene_ids: one per scene (default: each scene's `name`).
    """
    if scene_ids is None:
        scene_ids = [r.name for r in raws]
    if len(scene_ids) != len(raws):
        raise ValueError(f"scene_ids: {len(scene_ids)} ids for {len(raws)} scenes")
    pairs = []
    for raw, sid in zip(raws, scene_ids, strict=True):
        egos = eligible_egos(raw)
        if len(egos) == 0:
            continue
        stats = _scene_stats(raw)
        for ego in egos:
            pairs.append(Pair(str(sid), int(ego), _interactivity(raw, int(ego), stats)["score"]))
    return pairs


# ----------------------------------------------------------------------------------------------
# Splits


def _shortfall(n: int, available: int, what: str) -> str:
    if n > available:
        return f"{what}: asked for {n} pairs, only {available} available; returning all {available}"
    return ""


def interactive_split(pairs: Sequence[Pair], n: int) -> Split:
    """Top n pairs by score (descending); ties by scene_id, then ego index (ascending)."""
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    ranked = sorted((Pair(*p) for p in pairs), key=lambda p: (-p.score, p.scene_id, p.ego))
    return Split(ranked[:n], requested=n, warning=_shortfall(n, len(ranked), "interactive split"))


def random_split(pairs: Sequence[Pair], n: int, seed: int) -> Split:
    """n pairs sampled without replacement by numpy.random.default_rng(seed), in sampled order.

    The pairs are put in (scene_id, ego) order first, so the sample does not depend on input order.
    """
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    canon = sorted((Pair(*p) for p in pairs), key=lambda p: (p.scene_id, p.ego))
    k = min(n, len(canon))
    idx = np.random.default_rng(seed).choice(len(canon), size=k, replace=False) if k else []
    return Split([canon[int(i)] for i in idx], requested=n, warning=_shortfall(n, len(canon), "random split"))


# ----------------------------------------------------------------------------------------------
# Manifests


def write_manifest(path: str | os.PathLike, pairs: Sequence[Pair]) -> None:
    """CSV with header scene_id,ego,score; score written with 6 decimals."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(MANIFEST_HEADER)
        for p in pairs:
            p = Pair(*p)
            out.writerow([p.scene_id, int(p.ego), f"{float(p.score):.6f}"])


def read_manifest(path: str | os.PathLike) -> list[Pair]:
    """The pairs of a manifest written by `write_manifest`; ValueError naming the file and line."""
    pairs = []
    with open(path, newline="") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is None or tuple(h.strip() for h in header) != MANIFEST_HEADER:
            raise ValueError(f"{path}: line 1: header {header!r}, expected {','.join(MANIFEST_HEADER)}")
        for line, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) != 3:
                raise ValueError(f"{path}: line {line}: {len(row)} fields, expected 3")
            try:
                pairs.append(Pair(row[0], int(row[1]), float(row[2])))
            except ValueError as e:
                raise ValueError(f"{path}: line {line}: {e}") from None
    return pairs
