"""Procedural road layouts: geometry, lane graph, routes, determinism, signed distance."""

from __future__ import annotations

import functools
import math
from itertools import pairwise

import numpy as np
import pytest

from cp_jax.scenarios.procedural.layouts import (
    ALL_KINDS,
    EXTRA_KINDS,
    LAYOUT_KINDS,
    Layout,
    lane_graph_reachable,
    layout_extent,
    make_layout,
    signed_distance_to_edges,
)
from cp_jax.sim.types import CROSSWALK, ROAD_LINE, ROAD_TYPES, STOP_SIGN

SEEDS = range(5)
CASES = [(kind, seed) for kind in ALL_KINDS for seed in SEEDS]
CROSSING_KINDS = ("four_way", "t_junction", "merge", "roundabout", "left_turn")


@functools.cache
def layout(kind: str, seed: int) -> Layout:
    return make_layout(kind, np.random.default_rng(seed))


def heading(v: np.ndarray) -> np.ndarray:
    return np.arctan2(v[..., 1], v[..., 0])


def angle_diff(a, b):
    return np.abs((np.asarray(a) - np.asarray(b) + np.pi) % (2 * np.pi) - np.pi)


def length(poly: np.ndarray) -> float:
    return float(np.linalg.norm(np.diff(poly, axis=0), axis=1).sum())


def route_polyline(lay: Layout, route: list[int]) -> np.ndarray:
    return np.concatenate([lay.lanes[i] for i in route])


def densify(poly: np.ndarray, step: float) -> np.ndarray:
    out = [poly[:1]]
    for a, b in pairwise(poly):
        n = max(1, math.ceil(np.linalg.norm(b - a) / step))
        out.append(a + (b - a) * np.linspace(0, 1, n + 1)[1:, None])
    return np.concatenate(out)


def point_to_polyline(points: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """[P] unsigned distance from points to a polyline."""
    a, d = poly[:-1], np.diff(poly, axis=0)
    ap = points[:, None] - a[None]
    t = np.clip(np.sum(ap * d, axis=2) / np.maximum(np.sum(d * d, axis=1), 1e-12), 0, 1)
    return np.linalg.norm(ap - t[..., None] * d, axis=2).min(axis=1)


def car_corners(x, y, yaw, length_, width) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    local = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * [length_ / 2, width / 2]
    return local @ np.array([[c, s], [-s, c]]) + [x, y]


def boxes_overlap(p: np.ndarray, q: np.ndarray) -> bool:
    """Separating-axis test for two convex quads [4, 2]."""
    for poly in (p, q):
        for i in range(4):
            edge = poly[(i + 1) % 4] - poly[i]
            axis = np.array([-edge[1], edge[0]])
            a, b = p @ axis, q @ axis
            if a.max() <= b.min() or b.max() <= a.min():
                return False
    return True


# ------------------------------------------------------------------------------------------------
# Structure.


def test_kinds_and_unknown_kind():
    assert set(LAYOUT_KINDS) == {
        "four_way", "t_junction", "merge", "roundabout", "multi_lane", "left_turn",
        "narrow_passage",
    }
    assert EXTRA_KINDS == ("highway",) and ALL_KINDS == LAYOUT_KINDS + EXTRA_KINDS  # opt-in, not in the cycle
    with pytest.raises(ValueError):
        make_layout("spaghetti_junction", np.random.default_rng(0))


@pytest.mark.parametrize("kind,seed", CASES)
def test_structure_and_sizes(kind, seed):
    lay = layout(kind, seed)
    n = len(lay.lanes)
    assert lay.kind == kind
    assert 2 <= n <= 60
    assert len(lay.lane_succ) == len(lay.lane_left) == len(lay.lane_right) == n
    assert 3.2 <= lay.lane_width <= 3.8
    for poly in lay.lanes + lay.edges + [p for _, p in lay.others]:
        assert poly.dtype == np.float64 and poly.ndim == 2 and poly.shape[1] == 2
        assert len(poly) >= 2 and np.isfinite(poly).all()
    assert sum(len(e) - 1 for e in lay.edges) <= 600
    for succ in lay.lane_succ:
        assert all(0 <= s < n for s in succ) and len(set(succ)) == len(succ) <= 4
    for t, _ in lay.others:
        assert 0 <= t < len(ROAD_TYPES)
    xmin, ymin, xmax, ymax = layout_extent(lay)
    reach = 900 if kind == "highway" else 250  # a highway runs 450-600 m, up to ~820 m with long curves
    assert 0 < xmax - xmin <= reach and 0 < ymax - ymin <= reach
    assert len(lay.routes) == len(lay.route_priority) >= 2
    assert set(lay.route_priority) <= {0, 1}
    assert len(lay.tl_lanes) == len(lay.tl_phase)
    assert all(0 <= i < n for i in lay.tl_lanes) and set(lay.tl_phase) <= {0, 1}
    assert (len(lay.parked) > 0) == (kind == "narrow_passage")


@pytest.mark.parametrize("kind,seed", CASES)
def test_segment_lengths(kind, seed):
    """Segments <= 10 m; segments on curves (turning at both their ends) <= 2 m, or, on a highway's wide
    curves (300-800 m radius), within 1.5 cm of the arc they stand for (sagitta ~ length x turn / 8)."""
    lay = layout(kind, seed)
    for poly in lay.lanes + lay.edges:
        seg = np.diff(poly, axis=0)
        seg_len = np.linalg.norm(seg, axis=1)
        assert seg_len.max() <= 10.0 + 1e-6
        assert seg_len.min() > 1e-3
        turn = np.degrees(angle_diff(heading(seg[1:]), heading(seg[:-1])))  # at interior vertices
        turn_at = np.concatenate([[0.0], turn, [0.0]])  # per vertex, 0 at the two ends
        curved = (turn_at[:-1] > 0.5) & (turn_at[1:] > 0.5)
        sagitta = seg_len * np.radians(np.maximum(turn_at[:-1], turn_at[1:])) / 8.0
        wide = sagitta[curved] <= 0.015 if kind == "highway" else False  # only a highway's curves are wide
        assert np.all((seg_len[curved] <= 2.0 + 1e-6) | wide)


# ------------------------------------------------------------------------------------------------
# Geometry against the road edges.


@pytest.mark.parametrize("kind,seed", CASES)
def test_lanes_inside_edges(kind, seed):
    lay = layout(kind, seed)
    rng = np.random.default_rng(100 + seed)
    limit = -0.5 * lay.lane_width + 0.3
    for i, lane in enumerate(lay.lanes):
        pts = densify(lane, 1.0)
        sd = signed_distance_to_edges(pts, lay.edges)
        assert sd.max() <= limit, (i, sd.max(), limit)
        # Random points in the lane's 1 m corridor (+-0.5 m lateral).
        seg = np.diff(lane, axis=0)
        k = rng.integers(len(seg), size=20)
        f = rng.random(20)[:, None]
        u = seg[k] / np.linalg.norm(seg[k], axis=1, keepdims=True)
        side = np.stack([-u[:, 1], u[:, 0]], axis=1)
        corridor = lane[k] + f * seg[k] + rng.uniform(-0.5, 0.5, size=(20, 1)) * side
        assert np.all(signed_distance_to_edges(corridor, lay.edges) < 0), i


@pytest.mark.parametrize("kind,seed", CASES)
def test_points_outside_road_are_offroad(kind, seed):
    """5 m to the right of each edge segment's midpoint is off-road and far from every lane.

    Points that land closer to some other edge than to their own segment (arm openings, the
    merge's gore) are skipped.
    """
    lay = layout(kind, seed)
    candidates = []
    for edge in lay.edges:
        seg = np.diff(edge, axis=0)
        u = seg / np.linalg.norm(seg, axis=1, keepdims=True)
        right = np.stack([u[:, 1], -u[:, 0]], axis=1)
        candidates.append(edge[:-1] + 0.5 * seg + 5.0 * right)
    pts = np.concatenate(candidates)
    sd = signed_distance_to_edges(pts, lay.edges)
    keep = np.abs(sd) >= 5.0 - 1e-6
    assert keep.mean() > 0.3
    assert np.all(sd[keep] > 0)
    lane_dist = np.min([point_to_polyline(pts[keep], lane) for lane in lay.lanes], axis=0)
    assert lane_dist.min() > 0.5 * lay.lane_width + 2.0


# ------------------------------------------------------------------------------------------------
# Lane graph and routes.


@pytest.mark.parametrize("kind,seed", CASES)
def test_successor_continuity(kind, seed):
    lay = layout(kind, seed)
    for i, succ in enumerate(lay.lane_succ):
        end, h_end = lay.lanes[i][-1], heading(lay.lanes[i][-1] - lay.lanes[i][-2])
        for j in succ:
            start, h_start = lay.lanes[j][0], heading(lay.lanes[j][1] - lay.lanes[j][0])
            assert np.linalg.norm(end - start) < 0.1, (i, j)
            assert np.degrees(angle_diff(h_end, h_start)) < 25.0, (i, j)


@pytest.mark.parametrize("kind,seed", CASES)
def test_neighbours_symmetric_and_offset(kind, seed):
    lay = layout(kind, seed)
    for a, b in enumerate(lay.lane_left):
        if b >= 0:
            assert lay.lane_right[b] == a
    for a, b in enumerate(lay.lane_right):
        if b >= 0:
            assert lay.lane_left[b] == a
    for a, b in enumerate(lay.lane_left):
        if b < 0:
            continue
        lane = lay.lanes[a]
        mid = len(lane) // 2
        p = 0.5 * (lane[mid - 1] + lane[mid]) if len(lane) > 2 else lane.mean(axis=0)
        d = point_to_polyline(p[None], lay.lanes[b])[0]
        assert abs(d - lay.lane_width) < 0.3, (a, b, d)
        # b is on a's left, driving the same way.
        t = lane[mid] - lane[mid - 1]
        q = lay.lanes[b][np.argmin(np.linalg.norm(lay.lanes[b] - p, axis=1))]
        assert t[0] * (q - p)[1] - t[1] * (q - p)[0] > 0
        tb = np.diff(lay.lanes[b], axis=0).sum(axis=0)
        assert np.dot(np.diff(lane, axis=0).sum(axis=0), tb) > 0


def test_multi_lane_has_neighbours():
    for seed in SEEDS:
        lay = layout("multi_lane", seed)
        with_left = sum(b >= 0 for b in lay.lane_left)
        assert with_left >= len(lay.lanes) // 3  # 2-3 lanes per direction


@pytest.mark.parametrize("kind,seed", CASES)
def test_routes_connected_and_long(kind, seed):
    lay = layout(kind, seed)
    for route in lay.routes:
        assert len(route) >= 1
        for a, b in pairwise(route):
            assert b in lay.lane_succ[a]
        assert sum(length(lay.lanes[i]) for i in route) >= 30.0
        assert lane_graph_reachable(lay, route[0], route[-1])


def _min_distance(p: np.ndarray, q: np.ndarray) -> float:
    lo = np.maximum(p.min(0), q.min(0)) - 1.0
    hi = np.minimum(p.max(0), q.max(0)) + 1.0
    if np.any(lo > hi):
        return np.inf
    p = p[np.all((p >= lo) & (p <= hi), axis=1)]
    q = q[np.all((q >= lo) & (q <= hi), axis=1)]
    if len(p) == 0 or len(q) == 0:
        return np.inf
    return float(np.min(np.linalg.norm(p[:, None] - q[None], axis=2)))


@pytest.mark.parametrize("kind", CROSSING_KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_some_routes_cross_or_merge(kind, seed):
    lay = layout(kind, seed)
    paths = [densify(route_polyline(lay, r), 0.5) for r in lay.routes]
    found = any(
        lay.routes[i][0] != lay.routes[j][0] and _min_distance(paths[i], paths[j]) < 1.0
        for i in range(len(paths))
        for j in range(i + 1, len(paths))
    )
    assert found


def test_lane_graph_reachable():
    lay = layout("four_way", 0)
    # An exit lane leads nowhere; an entry lane reaches its routes' exits.
    exit_lane = lay.routes[0][-1]
    assert not lay.lane_succ[exit_lane]
    assert not lane_graph_reachable(lay, exit_lane, lay.routes[0][0])
    assert lane_graph_reachable(lay.lane_succ, lay.routes[0][0], exit_lane)
    assert lane_graph_reachable(lay, 3, 3)
    # Lane changes: in multi_lane, the outer lane of a direction is only reachable by changing.
    ml = layout("multi_lane", 0)
    inner, outer = ml.routes[0], ml.routes[1]
    assert ml.lane_right[inner[0]] == outer[0]
    assert not lane_graph_reachable(ml, inner[0], outer[-1])
    assert lane_graph_reachable(ml, inner[0], outer[-1], lane_changes=True)
    assert lane_graph_reachable(ml.lane_succ, inner[0], outer[-1], lane_changes=True,
                                lane_left=ml.lane_left, lane_right=ml.lane_right)


def _turn(lay: Layout, route: list[int]) -> float:
    """Signed heading change (degrees) from the route's first to last lane."""
    first, last = lay.lanes[route[0]], lay.lanes[route[-1]]
    h0, h1 = heading(first[-1] - first[-2]), heading(last[1] - last[0])
    return math.degrees((h1 - h0 + math.pi) % (2 * math.pi) - math.pi)


def test_priorities():
    for seed in SEEDS:
        merge = layout("merge", seed)
        assert merge.route_priority[-1] == 1 and set(merge.route_priority[:-1]) == {0}
        assert all(p == 1 for p in layout("roundabout", seed).route_priority)
        assert all(p == 0 for p in layout("multi_lane", seed).route_priority)
        assert sorted(layout("narrow_passage", seed).route_priority) == [0, 1]
        t = layout("t_junction", seed)
        assert 0 in t.route_priority and 1 in t.route_priority
        for kind in ("four_way", "left_turn"):
            lay = layout(kind, seed)
            for route, prio in zip(lay.routes, lay.route_priority, strict=True):
                if _turn(lay, route) > 45:  # left turns across oncoming traffic yield
                    assert prio == 1
            assert 0 in lay.route_priority
        # left_turn: unprotected left turns come first, then oncoming straight traffic.
        lt = layout("left_turn", seed)
        assert _turn(lt, lt.routes[0]) > 45 and lt.route_priority[0] == 1
        first_straight = next(i for i, r in enumerate(lt.routes) if abs(_turn(lt, r)) < 30)
        assert lt.route_priority[first_straight] == 0


def test_traffic_lights_and_stop_signs():
    seen_signal = seen_stop = False
    for seed in range(12):
        lay = layout("four_way", seed) if seed < 5 else make_layout(
            "four_way", np.random.default_rng(seed))
        stops = [p for t, p in lay.others if t == STOP_SIGN]
        if lay.tl_lanes:
            seen_signal = True
            assert not stops
            assert set(lay.tl_phase) == {0, 1}
            # Every lane entering the junction is controlled through its connectors.
            controlled = {a for a, succ in enumerate(lay.lane_succ) for s in succ
                          if s in lay.tl_lanes}
            assert len(controlled) >= 4
        else:
            seen_stop = True
            assert stops and all(p.shape == (2, 2) for p in stops)
            assert all(np.linalg.norm(p[1] - p[0]) < 1.0 for p in stops)
            assert sum(t == CROSSWALK for t, _ in lay.others) == 4
    assert seen_signal and seen_stop
    for seed in SEEDS:
        t = layout("t_junction", seed)
        assert not t.tl_lanes and any(k == STOP_SIGN for k, _ in t.others)
        assert any(k == ROAD_LINE for k, _ in t.others)


# ------------------------------------------------------------------------------------------------
# Determinism, parked cars.


def test_determinism():
    for kind in ALL_KINDS:
        a = make_layout(kind, np.random.default_rng(7))
        b = make_layout(kind, np.random.default_rng(7))
        c = make_layout(kind, np.random.default_rng(8))
        assert len(a.lanes) == len(b.lanes) and len(a.edges) == len(b.edges)
        assert all(np.array_equal(x, y) for x, y in zip(a.lanes, b.lanes, strict=True))
        assert all(np.array_equal(x, y) for x, y in zip(a.edges, b.edges, strict=True))
        assert all(s == t and np.array_equal(x, y) for (s, x), (t, y) in zip(a.others, b.others, strict=True))
        assert (a.lane_succ, a.lane_left, a.lane_right) == (b.lane_succ, b.lane_left, b.lane_right)
        assert (a.routes, a.route_priority, a.parked) == (b.routes, b.route_priority, b.parked)
        assert (a.tl_lanes, a.tl_phase, a.lane_width) == (b.tl_lanes, b.tl_phase, b.lane_width)
        same = len(a.lanes) == len(c.lanes) and all(
            x.shape == y.shape and np.allclose(x, y) for x, y in zip(a.lanes, c.lanes, strict=True))
        assert not same


@pytest.mark.parametrize("seed", SEEDS)
def test_parked_cars(seed):
    lay = layout("narrow_passage", seed)
    assert 2 <= len(lay.parked) <= 5
    boxes = [car_corners(*car) for car in lay.parked]
    for box in boxes:
        assert np.all(signed_distance_to_edges(box, lay.edges) < 0)
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes_overlap(boxes[i], boxes[j])
    # The cars reach into one lane so that a car driving its centreline must swerve (>= 2 m wide
    # vehicle), and leave the other lane free. The blocked lane's centreline itself swerves around
    # the cars (see test_narrow_passage_swerve), so this checks the lanes' straight lines as they
    # run before the swerve.
    blocked = []
    for lane in lay.lanes:
        lane = _straight_line(lane)
        d = np.array([point_to_polyline(box, lane).min() for box in boxes])
        centres = np.array([car[:2] for car in lay.parked])
        d_centre = point_to_polyline(centres, lane)
        blocked.append(bool(np.any(d_centre < 0.5 * 1.9 + 1.0) and np.all(d > 0.0)))
    assert sum(blocked) == 1
    route_of = {r[0]: p for r, p in zip(lay.routes, lay.route_priority, strict=True)}
    assert route_of[blocked.index(True)] == 1


def _straight_line(lane: np.ndarray) -> np.ndarray:
    """[2, 2] the line through a lane's first segment, extended 1 km either way."""
    u = (lane[1] - lane[0]) / np.linalg.norm(lane[1] - lane[0])
    return np.stack([lane[0] - 1000.0 * u, lane[0] + 1000.0 * u])


def _point_to_box(points: np.ndarray, box: np.ndarray) -> np.ndarray:
    """[P] distance from points to a convex quad [4, 2] (0 inside)."""
    d = point_to_polyline(points, np.concatenate([box, box[:1]]))
    edges = np.roll(box, -1, axis=0) - box
    rel = points[:, None] - box[None]
    cross = edges[None, :, 0] * rel[..., 1] - edges[None, :, 1] * rel[..., 0]
    inside = np.all(cross > 0, axis=1) | np.all(cross < 0, axis=1)
    return np.where(inside, 0.0, d)


@pytest.mark.parametrize("seed", SEEDS)
def test_narrow_passage_swerve(seed):
    """The blocked lane swerves around the parked cars into the oncoming lane and back."""
    lay = layout("narrow_passage", seed)
    blocked = lay.routes[lay.route_priority.index(1)][0]
    oncoming = lay.routes[lay.route_priority.index(0)][0]
    lane, other = lay.lanes[blocked], lay.lanes[oncoming]
    pts = densify(lane, 0.25)
    boxes = [car_corners(*car) for car in lay.parked]
    # (a) A 2 m wide car on the centreline keeps >= 0.4 m from every parked car's box.
    for box in boxes:
        assert _point_to_box(pts, box).min() >= 0.5 * 2.0 + 0.4, box
    # (b) Conflict: alongside each parked car, the two centrelines are < 2.0 + 0.5 m apart, so
    # two cars passing there at the same time would collide.
    gap = point_to_polyline(pts, other)
    for box in boxes:
        assert gap[np.argmin(_point_to_box(pts, box))] < 2.5, box
    assert gap.min() < 2.5
    # (c) Gentle, continuous headings; the swerve starts and ends on the lane's straight line,
    # parallel to the oncoming lane, which stays straight.
    seg = np.diff(lane, axis=0)
    turn = np.degrees(angle_diff(heading(seg[1:]), heading(seg[:-1])))
    assert turn.max() < 20.0
    assert point_to_polyline(lane[-1:], _straight_line(lane))[0] < 0.05
    assert np.degrees(angle_diff(heading(seg[0]), heading(seg[-1]))) < 0.5
    assert np.degrees(angle_diff(heading(seg[0]), heading(other[0] - other[1]))) < 0.5
    assert point_to_polyline(other, _straight_line(other)).max() < 1e-6
    # The lane does swerve: its largest lateral shift clears the parked cars' inner side.
    assert point_to_polyline(pts, _straight_line(lane)).max() > 0.5


# ------------------------------------------------------------------------------------------------
# Signed distance.


SQUARE = [np.array([[-10.0, -10.0], [10.0, -10.0], [10.0, 10.0], [-10.0, 10.0], [-10.0, -10.0]])]


def test_signed_distance_square():
    pts = np.array([
        [0.0, 0.0],  # centre
        [15.0, 0.0],  # outside, beside a side
        [12.0, 12.0],  # outside, nearest point the convex corner (10, 10)
        [10.5, 10.2],  # just outside the corner
        [9.0, 9.5],  # inside, near a corner
        [-9.9, -9.9],  # inside, next to the closing vertex
        [-10.1, -10.05],  # outside the closing vertex
        [0.0, -10.0],  # on the edge
    ])
    sd = signed_distance_to_edges(pts, SQUARE)
    np.testing.assert_allclose(sd[0], -10.0)
    np.testing.assert_allclose(sd[1], 5.0)
    np.testing.assert_allclose(sd[2], math.hypot(2, 2))
    assert sd[3] > 0 and sd[4] < 0 and sd[5] < 0 and sd[6] > 0
    np.testing.assert_allclose(sd[7], 0.0, atol=1e-12)


def test_signed_distance_open_polylines_and_concave_corner():
    # The square split into two open halves gives the same signs.
    halves = [SQUARE[0][:3], SQUARE[0][2:]]
    pts = np.random.default_rng(0).uniform(-14, 14, size=(400, 2))
    inside = np.all(np.abs(pts) < 10, axis=1)
    sd = signed_distance_to_edges(pts, halves)
    assert np.all((sd < 0) == inside)
    np.testing.assert_allclose(sd, signed_distance_to_edges(pts, SQUARE))
    # L-shaped road: the concave corner (0, 0) of the road outline.
    l_shape = [np.array([[-10, -10], [10, -10], [10, 0], [0, 0], [0, 10], [-10, 10], [-10, -10]],
                        float)]
    on_road = np.array([[-1.0, -1.0], [-0.5, 2.0], [2.0, -0.5], [-9.0, 9.0]])
    off_road = np.array([[0.5, 0.5], [1.0, 3.0], [3.0, 1.0], [0.1, 0.1]])
    assert np.all(signed_distance_to_edges(on_road, l_shape) < 0)
    assert np.all(signed_distance_to_edges(off_road, l_shape) > 0)
    # Hole (island) traversed clockwise: its inside is off-road.
    island = [np.array([[-2, -2], [-2, 2], [2, 2], [2, -2], [-2, -2]], float)]
    sd = signed_distance_to_edges(np.array([[0.0, 0.0], [3.0, 3.0], [0.0, 2.5]]), island)
    assert sd[0] > 0 and sd[1] < 0 and sd[2] < 0
    assert np.all(np.isinf(signed_distance_to_edges(np.zeros((3, 2)), [])))
