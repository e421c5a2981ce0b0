"""Seeded procedural road networks: junctions, a merge, a roundabout, multi-lane and narrow roads, highways.

Pure numpy. Conventions follow `cp_jax.scenarios.raw`: metres, world frame, right-hand traffic,
lanes are centreline polylines in the driving direction, and road edges keep the drivable area
on their LEFT (counter-clockwise around the road surface). Lane ids index `Layout.lanes`.

`make_layout(kind, rng)` builds one layout; everything random comes from `rng`, so a seed gives
the same arrays every time. Each generator works in a local frame and the result is finally
rotated and shifted at random.

Why one module of ~920 lines: the eight generators share the builder, the junction machinery and the
polyline helpers above them, and each is read against the others (a new layout copies one); split
across files they would import each other's private helpers.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from itertools import pairwise
from types import MappingProxyType

import numpy as np

from cp_jax.sim.types import CROSSWALK, ROAD_LINE, STOP_SIGN

LAYOUT_KINDS = (
    "four_way", "t_junction", "merge", "roundabout", "multi_lane", "left_turn", "narrow_passage",
)
# Kinds outside the default cycle (procedural banks and seeded choices use LAYOUT_KINDS, so the scenes
# of every existing seed stay what they were); a config opts in with scenes.kinds.
EXTRA_KINDS = ("highway",)
ALL_KINDS = LAYOUT_KINDS + EXTRA_KINDS

LANE_STEP = 5.0  # m between points of straight lanes
EDGE_STEP = 8.0  # m between points of straight road edges and lines
CURVE_STEP = 1.0  # m between points of curved lanes (connectors)
EDGE_CURVE_STEP = 1.5  # m between points of curved road edges
SHOULDER = 0.3  # m of asphalt between the outermost lane's side and the curb at junctions
CROSSWALK_WIDTH = 3.0
SWERVE_CLEARANCE = 0.6  # m between a 2 m wide car and the parked cars it swerves around
MEDIAN_SHOULDER = 0.5  # m of asphalt between a divided road's median and its innermost lanes


def check_kinds(kinds, field: str) -> None:
    """Raises ValueError naming `field` when kinds holds a name outside ALL_KINDS."""
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown:
        raise ValueError(f"{field}: unknown layout kinds {unknown}; known: {ALL_KINDS}")


@dataclasses.dataclass
class Layout:
    """A road network without objects (see the module docstring for the conventions)."""

    kind: str
    lanes: list[np.ndarray]  # per lane, centreline [n_i, 2] float64 in driving direction
    lane_succ: list[list[int]]  # per lane, ids of the lanes continuing it
    lane_left: list[int]  # per lane, left neighbour (same direction) or -1
    lane_right: list[int]  # per lane, right neighbour or -1
    edges: list[np.ndarray]  # road-edge polylines [n_i, 2], road on their left
    others: list[tuple[int, np.ndarray]]  # (ROAD_TYPES id, polyline [n_i, 2])
    routes: list[list[int]]  # candidate routes: lane ids, entry lane -> exit lane
    route_priority: list[int]  # per route, 0 = right of way, 1 = must yield
    parked: list[tuple[float, float, float, float, float]]  # (x, y, yaw, length, width)
    tl_lanes: list[int]  # lanes whose entry is controlled by a traffic light
    tl_phase: list[int]  # per tl lane, phase group 0 or 1
    lane_width: float = 3.5  # m, shared by all lanes of the layout
    desired_speed: tuple[float, float] = (8.0, 14.0)  # m/s, range of the agents' IDM desired speeds
    start_speed: tuple[float, float] = (4.0, 11.0)  # m/s, range of start speeds on right-of-way routes
    # m of route the IDM run that makes the logs needs (None: SimConfig's default 96 points x 2 m): IDM
    # brakes for a route's end as for a stopped car, so a fast layout's routes must run to the road's end
    log_route_length: float | None = None


# ----------------------------------------------------------------------------------------------
# Polyline helpers.


def _dir(angle: float) -> np.ndarray:
    """[2] unit vector at `angle` radians."""
    return np.array([math.cos(angle), math.sin(angle)])


def _angle(v: np.ndarray) -> float:
    return math.atan2(v[1], v[0])


def _rot90(v: np.ndarray) -> np.ndarray:
    """[..., 2] vectors turned 90 degrees counter-clockwise (the left normal)."""
    return np.stack([-v[..., 1], v[..., 0]], axis=-1)


def _wrap(a: float) -> float:
    """Angle in [-pi, pi)."""
    return (a + math.pi) % (2 * math.pi) - math.pi


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def polyline_length(poly: np.ndarray) -> float:
    """Total length of a [n, 2] polyline."""
    return float(np.linalg.norm(np.diff(poly, axis=0), axis=1).sum())


def line(p0: np.ndarray, p1: np.ndarray, step: float) -> np.ndarray:
    """[n, 2] straight polyline p0 -> p1 with segments <= step."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    n = max(1, math.ceil(np.linalg.norm(p1 - p0) / step - 1e-9))
    return np.linspace(p0, p1, n + 1)


def arc(center: np.ndarray, radius: float, a0: float, a1: float, step: float) -> np.ndarray:
    """[n, 2] circular arc from angle a0 to a1 (a1 < a0: clockwise), chords <= step."""
    n = max(1, math.ceil(abs(a1 - a0) * radius / step - 1e-9))
    t = np.linspace(a0, a1, n + 1)
    return np.asarray(center, float) + radius * np.stack([np.cos(t), np.sin(t)], axis=1)


def resample(poly: np.ndarray, step: float) -> np.ndarray:
    """[m, 2] polyline with evenly spaced points (<= step apart), same end points."""
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(poly, axis=0), axis=1))])
    n = max(1, math.ceil(s[-1] / step - 1e-9))
    t = np.linspace(0.0, s[-1], n + 1)
    return np.stack([np.interp(t, s, poly[:, 0]), np.interp(t, s, poly[:, 1])], axis=1)


def offset_polyline(poly: np.ndarray, d: float) -> np.ndarray:
    """[n, 2] polyline shifted d metres to its left (d < 0: to its right), mitred at vertices."""
    seg = np.diff(poly, axis=0)
    normal = _rot90(seg / np.linalg.norm(seg, axis=1, keepdims=True))
    vn = np.concatenate([normal[:1], normal[:-1] + normal[1:], normal[-1:]])
    # Mitre: scale the interior bisectors so that the shifted segments stay d away.
    denom = np.maximum(np.sum(vn[1:-1] * normal[1:], axis=1, keepdims=True), 0.5)
    vn[1:-1] = vn[1:-1] / denom
    return poly + d * vn


def _join(*pieces: np.ndarray) -> np.ndarray:
    """[n, 2] concatenation of polylines, dropping repeated points where pieces meet."""
    pts = np.concatenate([np.asarray(p, float) for p in pieces])
    keep = np.ones(len(pts), bool)
    keep[1:] = np.linalg.norm(np.diff(pts, axis=0), axis=1) > 1e-3
    return pts[keep]


def _bezier(p0, u0, p1, u1, step: float) -> np.ndarray:
    """[n, 2] cubic Bezier from p0 (unit tangent u0) to p1 (tangent u1), resampled to step."""
    k = np.linalg.norm(p1 - p0) / 3.0
    c = np.stack([p0, p0 + k * u0, p1 - k * u1, p1])
    t = np.linspace(0.0, 1.0, 201)[:, None]
    pts = (1 - t) ** 3 * c[0] + 3 * (1 - t) ** 2 * t * c[1] + 3 * (1 - t) * t**2 * c[2]
    return resample(pts + t**3 * c[3], step)


def _intersect(pa, da, pb, db) -> tuple[float, float]:
    """(s, t) with pa + s*da == pb + t*db for two non-parallel lines."""
    s, t = np.linalg.solve(np.stack([da, -db], axis=1), pb - pa)
    return float(s), float(t)


def _connector(p0, h0: float, p1, h1: float, radius: float | None = None, fit: float = 1.0,
               step: float = CURVE_STEP) -> np.ndarray:
    """[n, 2] lane from pose (p0, h0) to pose (p1, h1).

    Turns of 20 degrees or more are line-arc-line: the arc is tangent to both lane lines, with
    `radius` (clipped so it fits) or, if None, `fit` times the largest radius that fits. Smaller
    heading changes (straight through) use a cubic Bezier.
    """
    u0, u1 = _dir(h0), _dir(h1)
    phi = _wrap(h1 - h0)
    if abs(phi) >= math.radians(20):
        s, t = _intersect(p0, u0, p1, -u1)
        if s > 0 and t > 0:
            tan_half = math.tan(abs(phi) / 2)
            r_max = min(s, t) / tan_half
            r = fit * r_max if radius is None else min(radius, r_max)
            d = r * tan_half
            corner = p0 + s * u0
            t0, t1 = corner - d * u0, corner + d * u1
            centre = t0 + math.copysign(r, phi) * _rot90(u0)
            a0 = _angle(t0 - centre)
            return _join(line(p0, t0, step), arc(centre, r, a0, a0 + phi, step),
                         line(t1, p1, step))
    return _bezier(np.asarray(p0, float), u0, np.asarray(p1, float), u1, step)


# ----------------------------------------------------------------------------------------------
# Builder.


class _Builder:
    """Collects lanes, edges and annotations; `finish` turns them into a `Layout`."""

    def __init__(self):
        self.lanes: list[np.ndarray] = []
        self.succ: list[list[int]] = []
        self.left: list[int] = []
        self.right: list[int] = []
        self.edges: list[np.ndarray] = []
        self.others: list[tuple[int, np.ndarray]] = []
        self.routes: list[list[int]] = []
        self.priority: list[int] = []
        self.parked: list[tuple[float, float, float, float, float]] = []
        self.tl_lanes: list[int] = []
        self.tl_phase: list[int] = []
        self.desired_speed = Layout.desired_speed
        self.start_speed = Layout.start_speed
        self.log_route_length = Layout.log_route_length

    def lane(self, poly: np.ndarray) -> int:
        self.lanes.append(np.asarray(poly, float))
        self.succ.append([])
        self.left.append(-1)
        self.right.append(-1)
        return len(self.lanes) - 1

    def link(self, a: int, b: int) -> None:
        if b not in self.succ[a]:
            self.succ[a].append(b)

    def side_by_side(self, left: int, right: int) -> None:
        """`left` is the left neighbour of `right` (same driving direction)."""
        self.right[left] = right
        self.left[right] = left

    def edge(self, poly: np.ndarray) -> None:
        self.edges.append(np.asarray(poly, float))

    def other(self, type_id: int, poly: np.ndarray) -> None:
        self.others.append((type_id, np.asarray(poly, float)))

    def route(self, lane_ids: list[int], priority: int) -> None:
        self.routes.append(list(lane_ids))
        self.priority.append(int(priority))

    def finish(self, kind: str, width: float, rng: np.random.Generator) -> Layout:
        """The layout, rotated by a random angle and shifted a few metres."""
        yaw = float(rng.uniform(-math.pi, math.pi))
        shift = rng.uniform(-5.0, 5.0, size=2)
        rot = np.array([[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]])

        def move(p: np.ndarray) -> np.ndarray:
            return p @ rot.T + shift

        parked = []
        for x, y, heading, length, w in self.parked:
            px, py = move(np.array([x, y]))
            parked.append((float(px), float(py), _wrap(heading + yaw), length, w))
        return Layout(
            kind=kind,
            lanes=[move(p) for p in self.lanes],
            lane_succ=[list(s) for s in self.succ],
            lane_left=list(self.left),
            lane_right=list(self.right),
            edges=[move(p) for p in self.edges],
            others=[(t, move(p)) for t, p in self.others],
            routes=[list(r) for r in self.routes],
            route_priority=list(self.priority),
            parked=parked,
            tl_lanes=list(self.tl_lanes),
            tl_phase=list(self.tl_phase),
            lane_width=float(width),
            desired_speed=self.desired_speed,
            start_speed=self.start_speed,
            log_route_length=self.log_route_length,
        )


def _crosswalk(origin, u, n, s0: float, s1: float, left: float, right: float) -> np.ndarray:
    """[5, 2] closed rectangle across a road (along u from s0 to s1, n-offsets -right..left)."""
    corners = [(s0, -right), (s1, -right), (s1, left), (s0, left), (s0, -right)]
    return np.array([origin + s * u + d * n for s, d in corners])


def _stop_sign(lane: np.ndarray) -> np.ndarray:
    """[2, 2] tiny polyline ending at the lane's end (its stop line)."""
    h = lane[-1] - lane[-2]
    return np.stack([lane[-1] - 0.5 * h / np.linalg.norm(h), lane[-1]])


# ----------------------------------------------------------------------------------------------
# Junctions (four_way, t_junction, left_turn).


@dataclasses.dataclass(frozen=True)
class _Arm:
    angle: float  # direction from the junction centre outwards
    n_in: int  # lanes driving towards the junction (on the arm's left, looking outwards)
    n_out: int  # lanes driving away
    length: float  # m of arm beyond the stop line
    axis: int  # 0 or 1: which road the arm belongs to (traffic-light phase group)
    major: bool  # has right of way when unsignalised
    moves: tuple[str, ...]  # per incoming lane (0 = innermost): allowed moves, subset of "LSR"
    median: float = 0.0  # painted gap between the centre line and the outgoing lanes


@dataclasses.dataclass(frozen=True)
class _Move:
    arm: int
    move: str  # "L", "S" or "R"
    lane_in: int
    conn: int
    lane_out: int


def _classify(arms: list[_Arm], k: int) -> dict[str, int]:
    """Move -> target arm for traffic arriving on arm k (no U-turns)."""
    ideal = {"S": 0.0, "L": math.pi / 2, "R": -math.pi / 2}
    best: dict[str, tuple[float, int]] = {}
    for i, arm in enumerate(arms):
        if i == k:
            continue
        phi = _wrap(arm.angle - arms[k].angle - math.pi)
        move = "S" if abs(phi) < math.pi / 4 else ("L" if phi > 0 else "R")
        err = abs(phi - ideal[move])
        if move not in best or err < best[move][0]:
            best[move] = (err, i)
    return {m: i for m, (_, i) in best.items()}


def _junction(b: _Builder, arms: list[_Arm], w: float, rc: float,
              signalised: bool) -> list[_Move]:
    """Adds arms, rounded corner curbs, connectors, crosswalks and controls around (0, 0).

    `arms` must be in counter-clockwise order; rc is the curb radius. Returns the movements.
    """
    count = len(arms)
    u = [_dir(a.angle) for a in arms]
    nrm = [_rot90(x) for x in u]
    hw_in = [a.n_in * w + SHOULDER for a in arms]  # curb offset on the arm's left (+n)
    hw_out = [a.median + a.n_out * w + SHOULDER for a in arms]  # on its right (-n)

    # Corner k joins arm k's left curb (walked inwards) to arm k+1's right curb (outwards).
    corners = []
    need = np.zeros(count)  # distance from the centre where each arm's straight curbs start
    for k in range(count):
        j = (k + 1) % count
        pa, da = hw_in[k] * nrm[k], -u[k]
        pb, db = -hw_out[j] * nrm[j], u[j]
        phi = _wrap(_angle(db) - _angle(da))
        if abs(phi) < 1e-6:
            corners.append(None)
            continue
        s, _ = _intersect(pa, da, pb, db)
        d = rc * math.tan(abs(phi) / 2)
        ta = pa + (s - d) * da
        tb = pa + s * da + d * db
        centre = ta + math.copysign(rc, phi) * _rot90(da)
        corners.append((ta, tb, centre, phi))
        need[k] = max(need[k], ta @ u[k])
        need[j] = max(need[j], tb @ u[j])
    r0 = need + CROSSWALK_WIDTH + 1.5  # stop lines, behind the crosswalks
    ends = r0 + np.array([a.length for a in arms])

    for k in range(count):
        j = (k + 1) % count
        far_a = ends[k] * u[k] + hw_in[k] * nrm[k]
        far_b = ends[j] * u[j] - hw_out[j] * nrm[j]
        if corners[k] is None:
            b.edge(line(far_a, far_b, EDGE_STEP))
            continue
        ta, tb, centre, phi = corners[k]
        a0 = _angle(ta - centre)
        b.edge(_join(line(far_a, ta, EDGE_STEP), arc(centre, rc, a0, a0 + phi, EDGE_CURVE_STEP),
                     line(tb, far_b, EDGE_STEP)))

    lanes_in, lanes_out = [], []
    for k, arm in enumerate(arms):
        ins, outs = [], []
        for j in range(arm.n_in):
            off = (j + 0.5) * w * nrm[k]
            ins.append(b.lane(line(ends[k] * u[k] + off, r0[k] * u[k] + off, LANE_STEP)))
        for j in range(arm.n_out):
            off = -(arm.median + (j + 0.5) * w) * nrm[k]
            outs.append(b.lane(line(r0[k] * u[k] + off, ends[k] * u[k] + off, LANE_STEP)))
        for lanes in (ins, outs):
            for a, c in pairwise(lanes):
                b.side_by_side(a, c)
        lanes_in.append(ins)
        lanes_out.append(outs)
        b.other(ROAD_LINE, line(r0[k] * u[k], ends[k] * u[k], EDGE_STEP))
        if arm.median > 0:
            off = -arm.median * nrm[k]
            b.other(ROAD_LINE, line(r0[k] * u[k] + off, ends[k] * u[k] + off, EDGE_STEP))
        s0 = r0[k] - CROSSWALK_WIDTH - 1.0
        b.other(CROSSWALK, _crosswalk(np.zeros(2), u[k], nrm[k], s0, s0 + CROSSWALK_WIDTH,
                                      hw_in[k], hw_out[k]))

    moves = []
    for k, arm in enumerate(arms):
        targets = _classify(arms, k)
        s_rank = 0
        for j, allowed in enumerate(arm.moves):
            lane_in = lanes_in[k][j]
            for move in allowed:
                if move not in targets:
                    continue
                i = targets[move]
                exit_idx = {"L": 0, "R": arms[i].n_out - 1}.get(move, min(s_rank, arms[i].n_out - 1))
                lane_out = lanes_out[i][exit_idx]
                radius = rc + 0.5 * w + SHOULDER if move == "R" else None  # hugs the curb
                poly = _connector(b.lanes[lane_in][-1], arm.angle + math.pi, b.lanes[lane_out][0],
                                  arms[i].angle, radius=radius, fit=0.8 if move == "L" else 1.0)
                conn = b.lane(poly)
                b.link(lane_in, conn)
                b.link(conn, lane_out)
                moves.append(_Move(k, move, lane_in, conn, lane_out))
            s_rank += "S" in allowed and "S" in targets

    if signalised:
        for mv in moves:
            b.tl_lanes.append(mv.conn)
            b.tl_phase.append(arms[mv.arm].axis)
    else:
        for k, arm in enumerate(arms):
            if not arm.major:
                for lane in lanes_in[k]:
                    b.other(STOP_SIGN, _stop_sign(b.lanes[lane]))
    return moves


def _move_priority(arm: _Arm, move: str, signalised: bool) -> int:
    """1 for left turns across oncoming traffic and, when unsignalised, for minor arms."""
    if move == "L" or (not signalised and not arm.major):
        return 1
    return 0


def _lane_moves(n: int) -> tuple[str, ...]:
    """Per-lane moves of an approach with n lanes: one lane does all, else left / right split."""
    return ("LSR",) if n == 1 else ("LS",) + ("S",) * (n - 2) + ("SR",)


def _junction_routes(b: _Builder, arms: list[_Arm], moves: list[_Move], signalised: bool,
                     first=lambda arm, mv: 0) -> None:
    """Adds one route per movement, ordered by `first(arm, move)` (stable)."""
    for mv in sorted(moves, key=lambda mv: first(arms[mv.arm], mv)):
        b.route([mv.lane_in, mv.conn, mv.lane_out],
                _move_priority(arms[mv.arm], mv.move, signalised))


def _four_way(b: _Builder, rng: np.random.Generator, w: float) -> None:
    jitter = np.radians(rng.uniform(-8.0, 8.0, size=4))
    lanes = rng.integers(1, 3, size=2)
    major_axis = int(rng.integers(2))
    signalised = bool(rng.random() < 0.5)
    lengths = rng.uniform(40.0, 80.0, size=4)
    arms = [
        _Arm(angle=k * math.pi / 2 + float(jitter[k]), n_in=int(lanes[k % 2]),
             n_out=int(lanes[k % 2]), length=float(lengths[k]), axis=k % 2,
             major=k % 2 == major_axis, moves=_lane_moves(int(lanes[k % 2])))
        for k in range(4)
    ]
    moves = _junction(b, arms, w, float(rng.uniform(6.0, 10.0)), signalised)
    _junction_routes(b, arms, moves, signalised)


def _left_turn(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """Four-way whose main road (axis 0) has left-turn pockets; left turns yield to oncoming."""
    jitter = np.radians(rng.uniform(-6.0, 6.0, size=4))
    through = int(rng.integers(1, 3))
    signalised = bool(rng.random() < 0.5)
    lengths = rng.uniform(40.0, 80.0, size=4)
    arms = []
    for k in range(4):
        if k % 2 == 0:  # main road: pocket (innermost, left only) + through lanes
            arm = _Arm(angle=k * math.pi / 2 + float(jitter[k]), n_in=through + 1, n_out=through,
                       length=float(lengths[k]), axis=0, major=True,
                       moves=("L",) + ("S",) * (through - 1) + ("SR",), median=w)
        else:
            arm = _Arm(angle=k * math.pi / 2 + float(jitter[k]), n_in=1, n_out=1,
                       length=float(lengths[k]), axis=1, major=False, moves=("LSR",))
        arms.append(arm)
    moves = _junction(b, arms, w, float(rng.uniform(6.0, 10.0)), signalised)

    def order(arm: _Arm, mv: _Move) -> int:  # main-road left turns, then main-road straights
        return 0 if arm.major and mv.move == "L" else (1 if arm.major and mv.move == "S" else 2)

    _junction_routes(b, arms, moves, signalised, first=order)


def _t_junction(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """Straight main road (arms at 0 and pi) and a stem near -pi/2 that yields (stop signs)."""
    main = int(rng.integers(1, 3))
    stem = int(rng.integers(1, 3))
    lengths = rng.uniform(40.0, 80.0, size=3)
    stem_angle = 1.5 * math.pi + math.radians(rng.uniform(-10.0, 10.0))
    arms = [
        _Arm(angle=0.0, n_in=main, n_out=main, length=float(lengths[0]), axis=0, major=True,
             moves=_lane_moves(main)),
        _Arm(angle=math.pi, n_in=main, n_out=main, length=float(lengths[1]), axis=0, major=True,
             moves=_lane_moves(main)),
        _Arm(angle=stem_angle, n_in=stem, n_out=stem, length=float(lengths[2]), axis=1,
             major=False, moves=_lane_moves(stem)),
    ]
    moves = _junction(b, arms, w, float(rng.uniform(6.0, 10.0)), signalised=False)
    _junction_routes(b, arms, moves, signalised=False)


# ----------------------------------------------------------------------------------------------
# Merge.


def _merge(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """One-way main road along +x (lanes below y = 0) and an on-ramp joining from the right.

    The ramp curves in, runs beside the road as an acceleration lane, then shifts into the
    rightmost lane; its successor is that lane's downstream part.
    """
    n = int(rng.integers(1, 3))
    margin = 0.5
    alpha = math.radians(rng.uniform(12.0, 22.0))
    rr = float(rng.uniform(40.0, 70.0))  # ramp curve radius
    approach = float(rng.uniform(30.0, 45.0))
    x_a = rr * math.sin(alpha) + approach * math.cos(alpha) + float(rng.uniform(5.0, 20.0))
    x_b = x_a + float(rng.uniform(15.0, 30.0))  # end of the parallel acceleration lane
    x_m = x_b + float(rng.uniform(25.0, 35.0))  # merge point
    x_end = x_m + float(rng.uniform(30.0, 50.0))
    ys = [-(j + 0.5) * w for j in range(n)]
    y_acc = -(n + 0.5) * w

    centre = np.array([x_a, y_acc - rr])
    ps = centre + rr * np.array([-math.sin(alpha), math.cos(alpha)])
    p0 = ps - approach * _dir(alpha)
    ramp = _join(
        line(p0, ps, 2.0),
        arc(centre, rr, math.pi / 2 + alpha, math.pi / 2, 1.5),
        line((x_a, y_acc), (x_b, y_acc), 2.0),
        _bezier(np.array([x_b, y_acc]), _dir(0.0), np.array([x_m, ys[-1]]), _dir(0.0), CURVE_STEP),
    )

    up = [b.lane(line((0.0, y), (x_m, y), LANE_STEP)) for y in ys]
    down = [b.lane(line((x_m, y), (x_end, y), LANE_STEP)) for y in ys]
    ramp_id = b.lane(ramp)
    for j in range(n):
        b.link(up[j], down[j])
        b.route([up[j], down[j]], 0)
    for lanes in (up, down):
        for a, c in pairwise(lanes):
            b.side_by_side(a, c)
    b.link(ramp_id, down[-1])
    b.route([ramp_id, down[-1]], 1)

    y_edge = -n * w - margin
    b.edge(line((x_end, margin), (0.0, margin), EDGE_STEP))  # left (median) side
    ramp_on = _join(ramp, line((x_m, ys[-1]), (x_end, ys[-1]), EDGE_STEP))
    b.edge(offset_polyline(ramp_on, -(0.5 * w + margin)))
    # Gore: the main road's right edge up to where the ramp's left edge meets it, then back
    # along the ramp's left edge.
    ramp_left = offset_polyline(ramp, 0.5 * w + margin)
    i = int(np.argmax(ramp_left[1:, 1] >= y_edge))
    f = (y_edge - ramp_left[i, 1]) / (ramp_left[i + 1, 1] - ramp_left[i, 1])
    gore = ramp_left[i] + f * (ramp_left[i + 1] - ramp_left[i])
    b.edge(_join(line((0.0, y_edge), gore, EDGE_STEP), gore[None], ramp_left[i::-1]))

    for j in range(1, n):
        b.other(ROAD_LINE, line((0.0, -j * w), (x_end, -j * w), EDGE_STEP))
    b.other(ROAD_LINE, line((gore[0], -n * w), (x_b, -n * w), EDGE_STEP))


# ----------------------------------------------------------------------------------------------
# Roundabout.


def _roundabout(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """One-lane counter-clockwise ring with 3-4 two-way arms; every route enters it (yields).

    Entry / exit lanes are arcs concentric with the curb fillets between arm and ring, so they
    join the ring lane tangentially. The ring lane is split at every entry and exit.
    """
    margin = 0.5
    radius = float(rng.uniform(12.0, 20.0))  # ring lane
    r_out, r_in = radius + 0.5 * w + margin, radius - 0.5 * w - margin
    hw = w + margin  # arm half width
    count = int(rng.integers(3, 5))
    spacing = 2 * math.pi / count
    angles = spacing * np.arange(count) + np.radians(rng.uniform(-6.0, 6.0, size=count))
    lengths = rng.uniform(40.0, 80.0, size=count)
    rf = float(rng.uniform(4.0, 7.0))  # fillet radius
    while True:  # keep >= 10 degrees of ring between one arm's entry and the next one's exit
        s_c = math.sqrt((r_out + rf) ** 2 - (hw + rf) ** 2)
        delta = math.atan2(hw + rf, s_c)
        gaps = np.diff(np.append(angles, angles[0] + 2 * math.pi)) - 2 * delta
        if gaps.min() >= math.radians(10.0) or rf < 2.0:
            break
        rf *= 0.8
    rho = rf + 0.5 * w + margin  # entry / exit lane radius about the fillet centre

    ins, outs, entries, exits, ring_a, ring_b = [], [], [], [], [], []
    fillets = []
    for k, th in enumerate(angles):
        u = _dir(th)
        nv = _rot90(u)
        far = s_c + lengths[k]
        f_in, f_out = s_c * u + (hw + rf) * nv, s_c * u - (hw + rf) * nv
        fillets.append((f_in, f_out))
        ins.append(b.lane(line(far * u + 0.5 * w * nv, s_c * u + 0.5 * w * nv, LANE_STEP)))
        entries.append(b.lane(arc(f_in, rho, th - math.pi / 2, th + delta - math.pi, CURVE_STEP)))
        exits.append(b.lane(arc(f_out, rho, th - delta + math.pi, th + math.pi / 2, CURVE_STEP)))
        outs.append(b.lane(line(s_c * u - 0.5 * w * nv, far * u - 0.5 * w * nv, LANE_STEP)))
        b.link(ins[k], entries[k])
        b.link(exits[k], outs[k])
        b.other(ROAD_LINE, line(s_c * u, far * u, EDGE_STEP))
        b.other(CROSSWALK, _crosswalk(np.zeros(2), u, nv, s_c + 1.5, s_c + 1.5 + CROSSWALK_WIDTH,
                                      hw, hw))
    for k, th in enumerate(angles):  # ring pieces: B_k passes arm k, A_k runs to arm k+1
        nxt = angles[(k + 1) % count] + (2 * math.pi if k == count - 1 else 0.0)
        ring_b.append(b.lane(arc(np.zeros(2), radius, th - delta, th + delta, 2.0)))
        ring_a.append(b.lane(arc(np.zeros(2), radius, th + delta, nxt - delta, 2.0)))
    for k in range(count):
        j = (k + 1) % count
        b.link(entries[k], ring_a[k])
        b.link(ring_b[k], ring_a[k])
        b.link(ring_a[k], ring_b[j])
        b.link(ring_a[k], exits[j])

    for k in range(count):
        j = (k + 1) % count
        th, th_j = angles[k], angles[j]
        nxt = th_j + (2 * math.pi if k == count - 1 else 0.0)
        u, u_j = _dir(th), _dir(th_j)
        b.edge(_join(
            line((s_c + lengths[k]) * u + hw * _rot90(u), s_c * u + hw * _rot90(u), EDGE_STEP),
            arc(fillets[k][0], rf, th - math.pi / 2, th + delta - math.pi, EDGE_CURVE_STEP),
            arc(np.zeros(2), r_out, th + delta, nxt - delta, EDGE_CURVE_STEP),
            arc(fillets[j][1], rf, th_j - delta + math.pi, th_j + math.pi / 2, EDGE_CURVE_STEP),
            line(s_c * u_j - hw * _rot90(u_j), (s_c + lengths[j]) * u_j - hw * _rot90(u_j),
                 EDGE_STEP),
        ))
    island = arc(np.zeros(2), r_in, 0.0, -2 * math.pi, EDGE_CURVE_STEP)  # clockwise
    island[-1] = island[0]
    b.edge(island)

    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            path = [ins[i], entries[i], ring_a[i]]
            cur = (i + 1) % count
            while cur != j:
                path += [ring_b[cur], ring_a[cur]]
                cur = (cur + 1) % count
            b.route(path + [exits[j], outs[j]], 1)


# ----------------------------------------------------------------------------------------------
# Straight-ish roads.


def _two_way_road(b: _Builder, centre: np.ndarray, n: int, w: float, margin: float,
                  sections: list[int], median: float = 0.0) -> tuple[list[list[int]], list[list[int]]]:
    """Lanes either side of `centre` [m, 2], split at point indices `sections` (incl. 0, m-1).

    Returns (forward, backward): per lane index j (0 = innermost), its section lane ids in
    driving order. Adds the outer edges (`margin` beyond the outermost lanes), the lines between lanes
    and, with median 0, the centre line; with median > 0 a divided road: a non-drivable strip that wide
    on the centre, edged on both sides, MEDIAN_SHOULDER of asphalt before the innermost lanes.
    """
    h = 0.5 * median + MEDIAN_SHOULDER if median > 0 else 0.0  # offset of the innermost lanes' inner side
    fwd, bwd = [], []
    for j in range(n):
        right = offset_polyline(centre, -(h + (j + 0.5) * w))
        left = offset_polyline(centre, h + (j + 0.5) * w)
        fwd.append([b.lane(right[a:c + 1]) for a, c in pairwise(sections)])
        bwd.append([b.lane(left[a:c + 1][::-1]) for a, c in pairwise(sections)][::-1])
    for lanes in fwd + bwd:
        for a, c in pairwise(lanes):
            b.link(a, c)
    for side in (fwd, bwd):
        for j in range(n - 1):
            for a, c in zip(side[j], side[j + 1], strict=True):
                b.side_by_side(a, c)
    b.edge(offset_polyline(centre, -(h + n * w + margin)))
    b.edge(offset_polyline(centre, h + n * w + margin)[::-1])
    if median > 0:
        b.edge(offset_polyline(centre, -0.5 * median)[::-1])  # the forward carriageway's median edge
        b.edge(offset_polyline(centre, 0.5 * median))  # the backward one's
    else:
        b.other(ROAD_LINE, centre)
    for j in range(1, n):
        b.other(ROAD_LINE, offset_polyline(centre, -(h + j * w)))
        b.other(ROAD_LINE, offset_polyline(centre, h + j * w))
    return fwd, bwd


def _multi_lane(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """Two-way road, 2-3 lanes per direction, straight or a gentle arc, in 3 sections."""
    n = int(rng.integers(2, 4))
    length = float(rng.uniform(120.0, 200.0))
    if rng.random() < 0.5:
        centre = line((0.0, 0.0), (length, 0.0), LANE_STEP)
    else:
        r = float(rng.uniform(120.0, 300.0))
        sign = 1.0 if rng.random() < 0.5 else -1.0
        a0 = -sign * math.pi / 2
        centre = arc(np.array([0.0, sign * r]), r, a0, a0 + sign * length / r, 1.5)
    m = len(centre) - 1
    sections = [0, m // 3, 2 * m // 3, m]
    fwd, bwd = _two_way_road(b, centre, n, w, 0.5, sections)
    for lanes in fwd + bwd:
        b.route(lanes, 0)


def _path(pieces: list[tuple[float, float]], step: float) -> np.ndarray:
    """[n, 2] polyline from the origin heading +x through pieces (length m, curvature 1/m, > 0 turning
    left), points <= step apart; the heading is continuous where pieces meet."""
    pts, p, heading = [np.zeros(2)], np.zeros(2), 0.0
    for length, k in pieces:
        s = np.linspace(0.0, length, max(1, math.ceil(length / step - 1e-9)) + 1)[1:]
        if abs(k) < 1e-9:
            q = p + s[:, None] * _dir(heading)
        else:
            th = heading + k * s
            q = p + np.stack([np.sin(th) - math.sin(heading), math.cos(heading) - np.cos(th)], axis=1) / k
        pts.append(q)
        p, heading = q[-1], heading + k * length
    return np.concatenate([pts[0][None], *pts[1:]])


def _highway(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """Divided highway, 2-3 lanes per direction, 450-600 m (up to ~820 m when its curves need it): a
    straight lead-in, then straight, one curve or an S of two (radius 300-800 m), a median strip between
    the carriageways; desired speeds 16-24 m/s, right-of-way starts at 14-22 m/s (the fast half of real
    WOMD starts). The routes of the run that makes the logs reach the road's end."""
    n = int(rng.integers(2, 4))
    total = float(rng.uniform(450.0, 600.0))
    pieces = [(float(rng.uniform(80.0, 150.0)), 0.0)]
    for i in range(int(rng.integers(0, 3))):  # 0, 1 or 2 (an S) curves
        turn, radius = float(rng.uniform(0.15, 0.45)), float(rng.uniform(300.0, 800.0))
        sign = (1.0 if rng.random() < 0.5 else -1.0) if i == 0 else -pieces[-1][1] / abs(pieces[-1][1])
        pieces.append((turn * radius, sign / radius))
    pieces.append((max(50.0, total - sum(length for length, _ in pieces)), 0.0))
    centre = _path(pieces, LANE_STEP)
    median, shoulder = float(rng.uniform(0.8, 4.0)), float(rng.uniform(0.5, 1.5))
    # Sections: a long one at each end (agents start in the last 60% of their route's first section:
    # ~100-150 m of each lane in both directions, so the traffic is not packed tighter than IDM's
    # headway at these speeds), ~150 m pieces between.
    m = len(centre) - 1
    first, last = int(round(0.4 * m)), int(round(0.6 * m))
    middle = max(1, round(polyline_length(centre[first:last + 1]) / 150.0))
    sections = sorted({0, *(int(round(x)) for x in np.linspace(first, last, middle + 1)), m})
    fwd, bwd = _two_way_road(b, centre, n, w, shoulder, sections, median=median)
    for lanes in fwd + bwd:
        b.route(lanes, 0)
    b.desired_speed, b.start_speed = (16.0, 24.0), (14.0, 22.0)
    b.log_route_length = polyline_length(centre)


def _smooth_bump(x: np.ndarray, a: float, b: float, ramp: float) -> np.ndarray:
    """[n] weight in [0, 1]: 0 up to a - ramp, a cosine rise to 1 at a, 1 on [a, b], back down
    to 0 at b + ramp. Its slope is zero where the ramps start and end (no kink in the lane)."""
    up = np.clip((x - (a - ramp)) / ramp, 0.0, 1.0)
    down = np.clip(((b + ramp) - x) / ramp, 0.0, 1.0)
    return 0.5 * (1.0 - np.cos(math.pi * np.minimum(up, down)))


def _narrow_passage(b: _Builder, rng: np.random.Generator, w: float) -> None:
    """Two-way road, one lane each way, with cars parked on one side partly in the lane.

    The blocked lane swerves around the parked cars into part of the oncoming lane and back, so
    the two lanes overlap there: the blocked direction has to wait for a gap in oncoming
    traffic, and its route yields. The oncoming lane stays straight.
    """
    length = float(rng.uniform(90.0, 150.0))
    shoulder = float(rng.uniform(0.6, 1.2))
    centre = line((0.0, 0.0), (length, 0.0), LANE_STEP)
    m = len(centre) - 1
    fwd, bwd = _two_way_road(b, centre, 1, w, shoulder, [0, m])
    blocked = int(rng.integers(2))  # 0: forward lane (parked at y < 0), 1: backward lane
    b.route(fwd[0], int(blocked == 0))
    b.route(bwd[0], int(blocked == 1))

    side = -1.0 if blocked == 0 else 1.0
    x = float(rng.uniform(0.3, 0.4)) * length
    for _ in range(int(rng.integers(2, 6))):
        car_len, car_w = float(rng.uniform(4.2, 5.0)), float(rng.uniform(1.8, 2.0))
        if x + car_len > 0.8 * length:
            break
        y = side * (w + shoulder - 0.25 - 0.5 * car_w)  # 25 cm from the curb
        yaw = (0.0 if blocked == 0 else math.pi) + math.radians(rng.uniform(-2.0, 2.0))
        b.parked.append((x + 0.5 * car_len, y, yaw, car_len, car_w))
        x += car_len + float(rng.uniform(1.0, 8.0))

    # The swerve, in the local frame (road along +x, blocked lane at y = side * w / 2). The
    # parked cars' extent from their corners (their yaw makes them stick out a little).
    corners = np.concatenate([
        np.array([cx, cy]) + np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * [0.5 * cl, 0.5 * cw]
        @ np.array([[math.cos(cyaw), math.sin(cyaw)], [-math.sin(cyaw), math.cos(cyaw)]])
        for cx, cy, cyaw, cl, cw in b.parked
    ])
    x_a, x_b = float(corners[:, 0].min()), float(corners[:, 0].max())
    inner = float((side * corners[:, 1]).min())  # parked cars' side nearest the road centre
    # Lane offset towards the parked side while passing them: a 2 m wide car keeps
    # SWERVE_CLEARANCE from them (>= 0.4 m), and the lane comes within 2.4 m of the oncoming
    # lane's centreline, so that two cars passing there at the same time would collide.
    hold = min(inner - 0.5 * 2.0 - SWERVE_CLEARANCE, 2.4 - 0.5 * w)
    # Straight, a cosine shift over `ramp` metres, held from 5 m before the first parked car to
    # (about) 5 m after the last, and back. The last car ends at most 0.8 * length, so >= 17.9 m
    # are left behind it for the margin and the ramp back.
    after = length - x_b - 1.0
    ramp = float(np.clip(after - 5.0, 12.0, 16.0))
    h0, h1 = x_a - 5.0, x_b + min(5.0, after - ramp)
    xs = np.unique(np.concatenate([
        line((0.0, 0.0), (h0 - ramp, 0.0), LANE_STEP)[:, 0],
        line((h0 - ramp, 0.0), (h0, 0.0), CURVE_STEP)[:, 0],
        line((h0, 0.0), (h1, 0.0), LANE_STEP)[:, 0],
        line((h1, 0.0), (h1 + ramp, 0.0), CURVE_STEP)[:, 0],
        line((h1 + ramp, 0.0), (length, 0.0), LANE_STEP)[:, 0],
    ]))
    ys = side * (0.5 * w + (hold - 0.5 * w) * _smooth_bump(xs, h0, h1, ramp))
    swerve = np.stack([xs, ys], axis=1)
    lane_id = fwd[0][0] if blocked == 0 else bwd[0][0]
    b.lanes[lane_id] = swerve if blocked == 0 else swerve[::-1].copy()


_GENERATORS = MappingProxyType({
    "four_way": _four_way,
    "t_junction": _t_junction,
    "merge": _merge,
    "roundabout": _roundabout,
    "multi_lane": _multi_lane,
    "left_turn": _left_turn,
    "narrow_passage": _narrow_passage,
    "highway": _highway,
})


def make_layout(kind: str, rng: np.random.Generator) -> Layout:
    """A random layout of `kind` (one of ALL_KINDS), deterministic given rng's state."""
    if kind not in _GENERATORS:
        raise ValueError(f"unknown layout kind {kind!r}; expected one of {ALL_KINDS}")
    w = float(rng.uniform(3.2, 3.8))
    b = _Builder()
    _GENERATORS[kind](b, rng, w)
    return b.finish(kind, w, rng)


# ----------------------------------------------------------------------------------------------
# Queries.


def lane_graph_reachable(graph, start_lane: int, goal_lane: int, *, lane_changes: bool = False,
                         lane_left: list[int] | None = None,
                         lane_right: list[int] | None = None) -> bool:
    """Whether goal_lane can be reached from start_lane (BFS).

    graph: a Layout / RawScene (anything with lane_succ, lane_left, lane_right) or the successor
    lists themselves (then pass lane_left / lane_right for lane changes). With lane_changes,
    moving to a left / right neighbour is also an edge of the graph.
    """
    if hasattr(graph, "lane_succ"):
        succ, left, right = graph.lane_succ, graph.lane_left, graph.lane_right
    else:
        succ, left, right = graph, lane_left, lane_right
    seen = {start_lane}
    queue = deque([start_lane])
    while queue:
        lane = queue.popleft()
        if lane == goal_lane:
            return True
        nxt = list(succ[lane])
        if lane_changes:
            nxt += [side[lane] for side in (left, right) if side is not None and side[lane] >= 0]
        for other in nxt:
            if other not in seen:
                seen.add(other)
                queue.append(other)
    return False


def _edge_segments(edges: list[np.ndarray]):
    """(a [S,2], b [S,2], tan_a [S,2], tan_b [S,2], dir [S,2]) over all edge polylines.

    tan_* are unit tangent bisectors at the segment's end vertices (the segment's own direction
    at an open polyline's ends; closed polylines wrap around).
    """
    out = [[], [], [], [], []]
    for poly in edges:
        poly = np.asarray(poly, float)
        if len(poly) < 2:
            continue
        keep = np.ones(len(poly), bool)
        keep[1:] = np.linalg.norm(np.diff(poly, axis=0), axis=1) > 1e-9
        poly = poly[keep]
        if len(poly) < 2:
            continue
        seg = np.diff(poly, axis=0)
        u = seg / np.linalg.norm(seg, axis=1, keepdims=True)
        closed = len(poly) > 2 and np.linalg.norm(poly[0] - poly[-1]) < 1e-6
        before = np.concatenate([u[-1:] if closed else u[:1], u])  # incoming at each vertex
        after = np.concatenate([u, u[:1] if closed else u[-1:]])  # outgoing at each vertex
        tan = before + after
        norm = np.linalg.norm(tan, axis=1, keepdims=True)
        hairpin = norm[:, 0] < 1e-9  # a 180-degree reversal: the road wraps around the tip
        tan = np.where(hairpin[:, None], -_rot90(before), tan / np.maximum(norm, 1e-12))
        for lst, arr in zip(out, (poly[:-1], poly[1:], tan[:-1], tan[1:], u), strict=True):
            lst.append(arr)
    if not out[0]:
        return tuple(np.zeros((0, 2)) for _ in range(5))
    return tuple(np.concatenate(lst) for lst in out)


def signed_distance_to_edges(points: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """[P] distance from points [P, 2] to the nearest edge segment; > 0 off-road, < 0 on road.

    Brute force over all segments. The sign is the side of the nearest segment, or, when the
    nearest point is a vertex, the side of the vertex's tangent bisector (correct at convex
    and concave corners). +inf when there are no edges.
    """
    pts = np.asarray(points, float).reshape(-1, 2)
    a, b, tan_a, tan_b, u = _edge_segments(edges)
    if len(a) == 0:
        return np.full(len(pts), np.inf)
    d = b - a
    len2 = np.sum(d * d, axis=1)
    result = np.empty(len(pts))
    for lo in range(0, len(pts), 2048):
        p = pts[lo:lo + 2048]
        ap = p[:, None, :] - a[None]
        t = np.clip(np.sum(ap * d[None], axis=2) / len2[None], 0.0, 1.0)
        diff = ap - t[..., None] * d[None]
        dist2 = np.sum(diff * diff, axis=2)
        idx = np.argmin(dist2, axis=1)
        rows = np.arange(len(p))
        t_near, diff_near = t[rows, idx], diff[rows, idx]
        tangent = np.where((t_near <= 0.0)[:, None], tan_a[idx],
                           np.where((t_near >= 1.0)[:, None], tan_b[idx], u[idx]))
        left = _cross(tangent, diff_near) > 0.0
        result[lo:lo + 2048] = np.where(left, -1.0, 1.0) * np.sqrt(dist2[rows, idx])
    return result


def layout_extent(layout: Layout) -> tuple[float, float, float, float]:
    """(xmin, ymin, xmax, ymax) over lanes, edges and other polylines."""
    pts = np.concatenate(layout.lanes + layout.edges + [p for _, p in layout.others])
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])
