"""RawScene -> padded `Scenario`: validation, road segments, lane graph, routes, the road index."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import geometry, types
from cp_jax.sim.types import Scenario, SimConfig


class SceneError(ValueError):
    """A scene that cannot be built; the message names the scene and the field."""


def _fail(raw: RawScene, field: str, why: str):
    raise SceneError(f"scene {raw.name!r}: field {field!r}: {why}")


def _check_finite(raw: RawScene, field: str, x: np.ndarray, mask: np.ndarray | None = None):
    x = np.asarray(x, np.float64)
    bad = ~np.isfinite(x)
    if mask is not None:
        bad &= mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    if bad.any():
        _fail(raw, field, f"{int(bad.sum())} non-finite value(s)")


def polyline_segments(poly: np.ndarray):
    """Segments of a polyline [n, 2], zero-length ones dropped, with vertex tangent bisectors.

    Returns (xy0 [m, 2], xy1 [m, 2], tan0 [m, 2], tan1 [m, 2]).
    """
    poly = np.asarray(poly, np.float64)
    keep = np.concatenate([[True], np.linalg.norm(np.diff(poly, axis=0), axis=1) > 1e-6])
    poly = poly[keep]
    if len(poly) < 2:
        z = np.zeros((0, 2))
        return z, z, z, z
    d = np.diff(poly, axis=0)
    u = d / np.linalg.norm(d, axis=1, keepdims=True)
    closed = len(poly) > 3 and np.linalg.norm(poly[0] - poly[-1]) < 1e-3
    prev = np.concatenate([u[-1:] if closed else u[:1], u[:-1]])
    nxt = np.concatenate([u[1:], u[:1] if closed else u[-1:]])

    def unit(v, fallback):
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return np.where(n > 1e-6, v / np.maximum(n, 1e-12), fallback)

    return poly[:-1], poly[1:], unit(prev + u, u), unit(u + nxt, u)


def resample_route(raw: RawScene, lanes: list[int], start: np.ndarray, goal: np.ndarray, cfg):
    """Route points every cfg.route_spacing m along the lanes, from start's to goal's projection
    + 30 m (so IDM drives through the goal instead of stopping at it), within the last lane.
    Returns (xy [R, 2], lane [R], n_valid)."""
    pieces, ids = [], []
    for lane in lanes:
        poly = np.asarray(raw.lanes[lane], np.float64)
        if pieces:
            poly = poly[1:] if np.linalg.norm(poly[0] - pieces[-1][-1]) < 1e-3 else poly
        pieces.append(poly)
        ids.append(np.full(len(poly), lane))
    line = np.concatenate(pieces)
    lane_of = np.concatenate(ids)
    seg = np.linalg.norm(np.diff(line, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])

    def project(p):
        a, b = line[:-1], line[1:]
        ab = b - a
        t = np.clip(np.sum((p - a) * ab, 1) / np.maximum(np.sum(ab * ab, 1), 1e-12), 0, 1)
        dist = np.linalg.norm(a + t[:, None] * ab - p, axis=1)
        i = int(np.argmin(dist))
        return s[i] + t[i] * seg[i]

    s0, s1 = project(start), min(project(goal) + 30.0, s[-1])  # drive through the goal, not to it
    n = int(min(cfg.max_route_points, max(2, np.floor((s1 - s0) / cfg.route_spacing) + 1)))
    q = s0 + cfg.route_spacing * np.arange(n)
    q = np.minimum(q, s[-1])
    xy = np.stack([np.interp(q, s, line[:, 0]), np.interp(q, s, line[:, 1])], -1)
    seg_idx = np.clip(np.searchsorted(s, q, side="right") - 1, 0, len(line) - 2)
    lane = np.where(q >= s[-1], lane_of[-1], lane_of[seg_idx + 1])
    return _pad_route(xy, lane, cfg)


def _pad_route(xy: np.ndarray, lane: np.ndarray, cfg):
    n = len(xy)
    out_xy = np.zeros((cfg.max_route_points, 2))
    out_lane = np.full(cfg.max_route_points, -1)
    out_xy[:n], out_lane[:n] = xy, lane
    out_xy[n:] = xy[-1]
    return out_xy, out_lane, n


LOG_ROUTE_MIN_TRAVEL = 2.0  # m: an object whose log moves less is parked, and keeps replaying it


def log_route(xy: np.ndarray, yaw_last: float, cfg):
    """A route along an object's logged path (its valid positions xy [m, 2], in time order) + 30 m
    along its last heading, for an object the lane graph gives no route (a lane change, a parking
    lot, a missing lane link): IDM then drives the logged path at its own speed. Points every
    cfg.route_spacing m, lane -1 (no traffic light is read on it). Returns (xy [R, 2], lane [R],
    n_valid), n_valid 0 when the log travels < LOG_ROUTE_MIN_TRAVEL m."""
    xy = np.asarray(xy, np.float64)
    if len(xy) < 2 or np.linalg.norm(xy[-1] - xy[0]) < LOG_ROUTE_MIN_TRAVEL:
        return np.zeros((cfg.max_route_points, 2)), np.full(cfg.max_route_points, -1), 0
    keep = [0]  # drop the jitter of a stopped car: points < 0.5 m from the last kept one
    for i in range(1, len(xy)):
        if np.linalg.norm(xy[i] - xy[keep[-1]]) >= 0.5:
            keep.append(i)
    line = xy[keep]
    line = np.concatenate([line, line[-1:] + 30.0 * np.array([[np.cos(yaw_last), np.sin(yaw_last)]])])
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(line, axis=0), axis=1))])
    n = int(min(cfg.max_route_points, np.floor(s[-1] / cfg.route_spacing) + 1))
    q = cfg.route_spacing * np.arange(n)
    route = np.stack([np.interp(q, s, line[:, 0]), np.interp(q, s, line[:, 1])], -1)
    return _pad_route(route, np.full(n, -1), cfg)


def _check_shapes(raw: RawScene) -> None:
    """Every per-object and per-lane field has the length its neighbours imply; ids are in range."""
    if np.ndim(raw.log_xy) != 3 or np.shape(raw.log_xy)[2] != 2:
        _fail(raw, "log_xy", f"shape {np.shape(raw.log_xy)}, expected [N, T, 2]")
    n, t = raw.log_xy.shape[:2]
    expect = {
        "log_yaw": (n, t), "log_vel": (n, t, 2), "log_valid": (n, t), "size": (n, 2), "obj_type": (n,),
        "goal": (n, 2), "controllable": (n,),
    }
    for field in ("priority", "object_ids"):
        if getattr(raw, field) is not None:
            expect[field] = (n,)
    for field, shape in expect.items():
        if np.shape(getattr(raw, field)) != shape:
            _fail(raw, field, f"shape {np.shape(getattr(raw, field))}, expected {shape}")
    if len(raw.routes) != n:
        _fail(raw, "routes", f"{len(raw.routes)} routes for {n} objects")
    if not 0 <= int(raw.sdc) < n:
        _fail(raw, "sdc", f"index {raw.sdc} out of range [0, {n})")
    bad_type = (np.asarray(raw.obj_type) < 0) | (np.asarray(raw.obj_type) >= len(types.OBJECT_TYPES))
    if bad_type.any():
        _fail(raw, "obj_type", f"object {int(np.flatnonzero(bad_type)[0])} has an unknown type id")
    n_lanes = len(raw.lanes)
    for field in ("lane_succ", "lane_left", "lane_right"):
        if len(getattr(raw, field)) != n_lanes:
            _fail(raw, field, f"{len(getattr(raw, field))} entries for {n_lanes} lanes")
    for field in ("lane_left", "lane_right"):
        ids = np.asarray(getattr(raw, field), int)
        if ((ids < -1) | (ids >= n_lanes)).any():
            _fail(raw, field, "lane id out of range")
    for i, lane in enumerate(raw.lanes):
        if len(polyline_segments(lane)[0]) == 0:
            _fail(raw, f"lanes[{i}]", "fewer than 2 distinct points")
    if raw.tl_state is not None:
        tl = np.asarray(raw.tl_state)
        if tl.ndim != 2 or tl.shape[0] != n_lanes or tl.shape[1] < t:
            _fail(raw, "tl_state", f"shape {tl.shape}, expected [{n_lanes}, >= {t}]")
        if ((tl < 0) | (tl > types.TL_GO)).any():
            _fail(raw, "tl_state", "unknown traffic-light state id")


def build_scenario(raw: RawScene, cfg: SimConfig) -> Scenario:
    """Validate a RawScene and pad it to cfg's static sizes. Raises SceneError naming the field."""
    a_max, s_max, l_max, t_max = cfg.max_agents, cfg.max_road_segments, cfg.max_lanes, cfg.log_steps
    _check_shapes(raw)
    n, t_raw = raw.log_xy.shape[:2]
    if n == 0:
        _fail(raw, "objects", "no objects")
    if n > a_max:
        _fail(raw, "objects", f"{n} objects > SimConfig.max_agents={a_max}")
    if t_raw < t_max:
        _fail(raw, "log_steps", f"log has {t_raw} steps < SimConfig.log_steps={t_max}")
    n_lanes = len(raw.lanes)
    if n_lanes > l_max:
        _fail(raw, "lanes", f"{n_lanes} lanes > SimConfig.max_lanes={l_max}")
    valid = np.asarray(raw.log_valid[:, :t_max], bool)
    for name in ("log_xy", "log_yaw", "log_vel"):
        _check_finite(raw, name, getattr(raw, name)[:, :t_max], valid)
    _check_finite(raw, "size", raw.size)
    _check_finite(raw, "goal", raw.goal)
    if (np.asarray(raw.size) <= 0).any():
        _fail(raw, "size", "non-positive length or width")

    # Road segments.
    polys = [(types.LANE, i, p) for i, p in enumerate(raw.lanes)]
    polys += [(types.ROAD_EDGE, -1, p) for p in raw.edges]
    polys += [(int(kind), -1, p) for kind, p in raw.others]
    parts = []
    for kind, lane, poly in polys:
        poly = np.asarray(poly, np.float64)
        if poly.ndim != 2 or poly.shape[1] != 2:
            _fail(raw, "roads", f"polyline of shape {poly.shape}, expected [n, 2]")
        _check_finite(raw, "roads", poly)
        xy0, xy1, t0, t1 = polyline_segments(poly)
        parts.append((xy0, xy1, t0, t1, np.full(len(xy0), kind), np.full(len(xy0), lane)))
    cat = [np.concatenate([p[i] for p in parts]) for i in range(6)] if parts else None
    n_seg = 0 if cat is None else len(cat[0])
    if n_seg > s_max:
        _fail(raw, "roads", f"{n_seg} road segments > SimConfig.max_road_segments={s_max}")
    if n_seg == 0:
        _fail(raw, "roads", "no road segments")

    def pad(x, size, fill=0.0, dtype=np.float32):
        x = np.asarray(x)
        out = np.full((size,) + x.shape[1:], fill, dtype)
        out[: len(x)] = x
        return out

    road_xy0, road_xy1 = pad(cat[0], s_max), pad(cat[1], s_max)
    road_tan0, road_tan1 = pad(cat[2], s_max), pad(cat[3], s_max)
    road_type = pad(cat[4], s_max, -1, np.int32)
    road_lane = pad(cat[5], s_max, -1, np.int32)
    road_valid = pad(np.ones(n_seg, bool), s_max, False, bool)
    seg = road_xy1 - road_xy0
    seg_len = np.linalg.norm(seg, axis=1)
    unit = seg / np.maximum(seg_len, 1e-9)[:, None]
    road_feat = np.concatenate(
        [0.5 * (road_xy0 + road_xy1), seg_len[:, None], unit, road_type[:, None].astype(np.float32)], 1
    ).astype(np.float32)

    # Lane graph.
    lane_succ = np.full((l_max, cfg.max_lane_successors), -1, np.int32)
    for i, succ in enumerate(raw.lane_succ):
        if len(succ) > cfg.max_lane_successors:
            _fail(raw, "lane_succ", f"lane {i} has {len(succ)} successors > max_lane_successors")
        if any(not 0 <= j < n_lanes for j in succ):
            _fail(raw, "lane_succ", f"lane {i} has a successor out of range")
        lane_succ[i, : len(succ)] = succ
    tl = np.zeros((l_max, t_max), np.int32)
    if raw.tl_state is not None:
        tl[:n_lanes] = np.asarray(raw.tl_state)[:n_lanes, :t_max]

    # Routes.
    route_xy = np.zeros((a_max, cfg.max_route_points, 2), np.float32)
    route_lane = np.full((a_max, cfg.max_route_points), -1, np.int32)
    route_len = np.zeros(a_max, np.int32)
    for i, lanes in enumerate(raw.routes):
        if any(not 0 <= j < n_lanes for j in lanes):
            _fail(raw, "routes", f"object {i} route names a lane out of range")
        if lanes:
            first_t = int(np.argmax(valid[i])) if valid[i].any() else 0
            xy, lane, m = resample_route(raw, lanes, raw.log_xy[i, first_t], raw.goal[i], cfg)
        elif raw.controllable[i] and valid[i].any():
            steps = np.flatnonzero(valid[i])
            xy, lane, m = log_route(raw.log_xy[i, steps], float(raw.log_yaw[i, steps[-1]]), cfg)
        else:
            continue
        route_xy[i], route_lane[i], route_len[i] = xy, lane, m

    priority = np.zeros(n, np.int32) if raw.priority is None else np.asarray(raw.priority)
    origin, cell, cell_edges, cell_lanes, cell_road = geometry.build_road_index(
        jnp.asarray(road_xy0), jnp.asarray(road_xy1), jnp.asarray(road_type),
        jnp.asarray(road_valid), cfg,
    )
    return Scenario(
        road_xy0=jnp.asarray(road_xy0),
        road_xy1=jnp.asarray(road_xy1),
        road_tan0=jnp.asarray(road_tan0),
        road_tan1=jnp.asarray(road_tan1),
        road_type=jnp.asarray(road_type),
        road_lane=jnp.asarray(road_lane),
        road_valid=jnp.asarray(road_valid),
        road_feat=jnp.asarray(road_feat),
        lane_succ=jnp.asarray(lane_succ),
        lane_left=jnp.asarray(pad(raw.lane_left, l_max, -1, np.int32)),
        lane_right=jnp.asarray(pad(raw.lane_right, l_max, -1, np.int32)),
        lane_valid=jnp.asarray(pad(np.ones(n_lanes, bool), l_max, False, bool)),
        tl_state=jnp.asarray(tl),
        log_xy=jnp.asarray(pad(np.where(valid[..., None], raw.log_xy[:, :t_max], 0.0), a_max)),
        log_yaw=jnp.asarray(pad(np.where(valid, raw.log_yaw[:, :t_max], 0.0), a_max)),
        log_vel=jnp.asarray(pad(np.where(valid[..., None], raw.log_vel[:, :t_max], 0.0), a_max)),
        log_valid=jnp.asarray(pad(valid, a_max, False, bool)),
        size=jnp.asarray(pad(raw.size, a_max, 1.0)),
        obj_type=jnp.asarray(pad(raw.obj_type, a_max, types.OTHER_OBJECT, np.int32)),
        agent_valid=jnp.asarray(pad(np.ones(n, bool), a_max, False, bool)),
        controllable=jnp.asarray(pad(np.asarray(raw.controllable, bool), a_max, False, bool)),
        goal=jnp.asarray(pad(raw.goal, a_max)),
        sdc=jnp.asarray(raw.sdc, jnp.int32),
        route_xy=jnp.asarray(route_xy),
        route_lane=jnp.asarray(route_lane),
        route_len=jnp.asarray(route_len),
        priority=jnp.asarray(pad(priority, a_max, 0, np.int32)),
        grid_origin=origin,
        grid_cell=cell,
        cell_edges=cell_edges,
        cell_lanes=cell_lanes,
        cell_road=cell_road,
    )


def unbuild(scenario: Scenario, name: str) -> RawScene:
    """The RawScene a stored Scenario (numpy leaves, one scene) keeps: objects and logs without padding,
    lanes rebuilt from their segments in order (zero-length points were dropped when it was built), road
    edges and other lines as one polyline per segment, routes not rebuilt (scored splits need none:
    `make_splits --format=cache`)."""
    sc = jax.tree.map(np.asarray, scenario)
    n = int(sc.agent_valid.sum())
    n_lanes = int(sc.lane_valid.sum())
    seg = np.flatnonzero(sc.road_valid)
    lanes = []
    for i in range(n_lanes):
        k = seg[sc.road_lane[seg] == i]
        lanes.append(np.concatenate([sc.road_xy0[k], sc.road_xy1[k[-1:]]]).astype(np.float64) if len(k)
                     else np.zeros((0, 2)))
    other = seg[sc.road_lane[seg] < 0]
    pieces = [(int(sc.road_type[k]), np.stack([sc.road_xy0[k], sc.road_xy1[k]]).astype(np.float64)) for k in other]
    return RawScene(
        name=name, lanes=lanes, lane_succ=[[int(j) for j in row if j >= 0] for row in sc.lane_succ[:n_lanes]],
        lane_left=[int(j) for j in sc.lane_left[:n_lanes]], lane_right=[int(j) for j in sc.lane_right[:n_lanes]],
        edges=[p for t, p in pieces if t == types.ROAD_EDGE],
        others=[(t, p) for t, p in pieces if t != types.ROAD_EDGE],
        log_xy=sc.log_xy[:n].astype(np.float64), log_yaw=sc.log_yaw[:n].astype(np.float64),
        log_vel=sc.log_vel[:n].astype(np.float64), log_valid=sc.log_valid[:n], size=sc.size[:n].astype(np.float64),
        obj_type=sc.obj_type[:n], goal=sc.goal[:n].astype(np.float64), controllable=sc.controllable[:n],
        routes=[[] for _ in range(n)], priority=sc.priority[:n], tl_state=sc.tl_state[:n_lanes], sdc=int(sc.sdc))


def object_ids(raw: RawScene) -> np.ndarray:
    """[N] each object's id in its source file (`RawScene.object_ids`; its index when None)."""
    return np.arange(raw.num_objects) if raw.object_ids is None else np.asarray(raw.object_ids)


def fit_to_config(raw: RawScene, cfg: SimConfig, keep: int | None = None) -> tuple[RawScene, int, int]:
    """Shrink a scene to cfg's static sizes (documented truncation rules).

    Objects: with more than max_agents, keep the SDC, `keep` (an ego index) and the objects nearest
    the SDC at their first valid step. Road: with more than max_road_segments segments or more than
    max_lanes lanes, keep whole polylines nearest the kept objects' logged positions (road edges and
    lanes first among equals) while both budgets last; lanes dropped this way are removed from the lane
    graph and routes. Returns (scene, objects dropped, road segments dropped).
    """
    n = raw.num_objects
    drop_objects = 0
    if n > cfg.max_agents:
        first = np.argmax(raw.log_valid, axis=1)
        pos = raw.log_xy[np.arange(n), first]
        dist = np.linalg.norm(pos - pos[raw.sdc], axis=-1)
        must = {raw.sdc} | ({keep} if keep is not None else set())
        dist[list(must)] = -1.0
        kept = np.sort(np.argsort(dist, kind="stable")[: cfg.max_agents])
        drop_objects = n - len(kept)
        remap = {int(old): new for new, old in enumerate(kept)}
        pick = lambda x: None if x is None else np.asarray(x)[kept]  # noqa: E731
        raw = dataclasses.replace(
            raw, log_xy=raw.log_xy[kept], log_yaw=raw.log_yaw[kept], log_vel=raw.log_vel[kept],
            log_valid=raw.log_valid[kept], size=raw.size[kept], obj_type=raw.obj_type[kept],
            goal=raw.goal[kept], controllable=raw.controllable[kept],
            routes=[raw.routes[i] for i in kept], priority=pick(raw.priority), sdc=remap[int(raw.sdc)],
            object_ids=pick(raw.object_ids),
        )

    seg_count = lambda p: max(len(p) - 1, 0)  # noqa: E731
    total = sum(map(seg_count, raw.lanes)) + sum(map(seg_count, raw.edges)) + sum(seg_count(p) for _, p in raw.others)
    if total <= cfg.max_road_segments and len(raw.lanes) <= cfg.max_lanes:
        return raw, drop_objects, 0
    pts = raw.log_xy[raw.log_valid]

    def distance(poly):
        d = np.linalg.norm(np.asarray(poly)[:, None, :2] - pts[None, ::7], axis=-1)
        return float(d.min())

    items = [("lane", i, p) for i, p in enumerate(raw.lanes)] + [("edge", i, p) for i, p in enumerate(raw.edges)]
    items += [("other", i, p) for i, (_, p) in enumerate(raw.others)]
    rank = {"edge": 0, "lane": 1, "other": 2}
    items.sort(key=lambda it: (round(distance(it[2]), 0), rank[it[0]]))
    budget, chosen = cfg.max_road_segments, {"lane": set(), "edge": set(), "other": set()}
    for kind, i, p in items:
        if seg_count(p) <= budget and (kind != "lane" or len(chosen["lane"]) < cfg.max_lanes):
            chosen[kind].add(i)
            budget -= seg_count(p)
    lanes_kept = sorted(chosen["lane"])
    lane_map = {old: new for new, old in enumerate(lanes_kept)}
    lm = lambda j: lane_map.get(j, -1)  # noqa: E731

    def route(r):
        out = []
        for lane in r:
            if lane not in lane_map:
                break
            out.append(lane_map[lane])
        return out

    tl = None if raw.tl_state is None else np.asarray(raw.tl_state)[lanes_kept]
    fitted = dataclasses.replace(
        raw,
        lanes=[raw.lanes[i] for i in lanes_kept],
        lane_succ=[[lane_map[j] for j in raw.lane_succ[i] if j in lane_map] for i in lanes_kept],
        lane_left=[lm(raw.lane_left[i]) for i in lanes_kept],
        lane_right=[lm(raw.lane_right[i]) for i in lanes_kept],
        edges=[raw.edges[i] for i in sorted(chosen["edge"])],
        others=[raw.others[i] for i in sorted(chosen["other"])],
        routes=[route(r) for r in raw.routes],
        tl_state=tl,
    )
    return fitted, drop_objects, total - (cfg.max_road_segments - budget)
