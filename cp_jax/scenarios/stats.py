"""Statistics of a scene set that a driving policy depends on, to compare procedural and real scenes.

    s = scene_statistics(bank, cfg)        # {name: 1-D float array}
    q = summarise(s)                        # {name: {n, mean, p10, p50, p90}}

Per driver (every controllable vehicle valid at t = 0 whose goal is >= 10 m away, the benchmark's
ego rule), from its logged pose at t = 0 and its log:
- start_offset: |lateral offset| from the nearest lane centreline going its way (m; the simulator's
  `geometry.lane_frame`);
- start_heading_error: |heading - that lane's heading| (deg);
- edge_clearance: distance from the box to the nearest road edge (m; negative: a corner is over it;
  `geometry.edge_distance` of the four corners, the simulator's off-road rule);
- start_speed: |logged velocity| (m/s);
- goal_distance: straight line start -> goal (m);
- density: other objects valid at t = 0 within 30 m (centre to centre);
- path_curvature: mean |heading change| per metre along the logged path where it moves (deg/m);
Per road: lane_segment_length and edge_segment_length (m, the simulator's segments), lane_width
(centreline to the nearest parallel centreline beside it, either direction, 2-6 m; m).

Pure numpy / jit over a bank [N, ...]; nothing is learned or simulated.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.scenarios.splits import MIN_GOAL_DIST  # the benchmark's ego eligibility
from cp_jax.sim import geometry, types
from cp_jax.sim.types import Scenario, SimConfig

DENSITY_RADIUS = 30.0  # m
DRIVER_STATS = ("start_offset", "start_heading_error", "edge_clearance", "start_speed", "goal_distance", "density",
                "path_curvature")
ROAD_STATS = ("lane_segment_length", "edge_segment_length", "lane_width")
UNITS = dict(start_offset="m", start_heading_error="deg", edge_clearance="m", start_speed="m/s", goal_distance="m",
             density="objects in 30 m", path_curvature="deg/m", lane_segment_length="m", edge_segment_length="m",
             lane_width="m")


@functools.partial(jax.jit, static_argnames="cfg")
def driver_statistics(bank: Scenario, cfg: SimConfig) -> dict[str, jax.Array]:
    """DRIVER_STATS [N, A] for every agent slot, and "driver" [N, A]: the agents they count for."""

    def one(sc: Scenario):
        xy, yaw, size = sc.log_xy[:, 0], sc.log_yaw[:, 0], sc.size
        valid0 = sc.log_valid[:, 0] & sc.agent_valid
        err, lateral, _, found = geometry.lane_frame(xy, yaw, sc, cfg)
        corners = geometry.box_corners(xy, yaw, size)
        clearance = -jnp.max(geometry.edge_distance(corners, sc, cfg, anchor=xy), -1)
        goal_dist = jnp.linalg.norm(sc.goal - xy, axis=-1)
        d = jnp.linalg.norm(xy[:, None] - xy[None], axis=-1)
        near = (d < DENSITY_RADIUS) & valid0[None, :] & ~jnp.eye(xy.shape[0], dtype=bool)
        # Path curvature: heading change per metre over logged steps where both ends are valid and it moves.
        step = jnp.linalg.norm(jnp.diff(sc.log_xy, axis=1), axis=-1)
        turn = jnp.abs(jnp.arctan2(jnp.sin(jnp.diff(sc.log_yaw, axis=1)), jnp.cos(jnp.diff(sc.log_yaw, axis=1))))
        ok = sc.log_valid[:, 1:] & sc.log_valid[:, :-1] & (step > 0.05)
        dist = jnp.sum(jnp.where(ok, step, 0.0), -1)
        curv = jnp.sum(jnp.where(ok, turn, 0.0), -1) / jnp.maximum(dist, 1e-6)
        driver = (valid0 & sc.controllable & (sc.obj_type == types.VEHICLE) & (goal_dist >= MIN_GOAL_DIST) & found)
        return dict(
            driver=driver,
            start_offset=jnp.abs(lateral),
            start_heading_error=jnp.degrees(jnp.abs(err)),
            edge_clearance=jnp.where(jnp.isfinite(clearance), clearance, jnp.nan),
            start_speed=jnp.linalg.norm(sc.log_vel[:, 0], axis=-1),
            goal_distance=goal_dist,
            density=jnp.sum(near, -1).astype(jnp.float32),
            path_curvature=jnp.where(dist > 1.0, jnp.degrees(curv), jnp.nan),
        )

    return jax.vmap(one)(bank)


def _lane_widths(sc) -> np.ndarray:
    """Per lane segment (numpy scene): distance to the nearest parallel lane centreline beside it (either
    direction; the perpendicular through its midpoint meets that segment; 2-6 m), NaN where none."""
    lane = (sc.road_type == types.LANE) & sc.road_valid
    a, b = sc.road_xy0[lane].astype(np.float64), sc.road_xy1[lane].astype(np.float64)
    if len(a) < 2:
        return np.zeros(0)
    seg = b - a
    length = np.linalg.norm(seg, axis=-1)
    u = seg / np.maximum(length, 1e-9)[:, None]
    mid = 0.5 * (a + b)
    out = np.full(len(a), np.nan)
    for lo in range(0, len(a), 256):  # [chunk, S] at a time
        m, um = mid[lo:lo + 256], u[lo:lo + 256]
        rel = m[:, None] - a[None]  # [c, S, 2]
        along = np.sum(rel * u[None], -1)
        across = np.abs(rel[..., 0] * u[None, :, 1] - rel[..., 1] * u[None, :, 0])
        parallel = np.abs(np.sum(um[:, None] * u[None], -1)) > np.cos(np.radians(15.0))
        beside = parallel & (along >= 0) & (along <= length[None]) & (across >= 2.0) & (across <= 6.0)
        best = np.where(beside, across, np.inf).min(-1)
        out[lo:lo + 256] = np.where(np.isfinite(best), best, np.nan)
    return out


def scene_statistics(bank: Scenario, cfg: SimConfig) -> dict[str, np.ndarray]:
    """{statistic: 1-D array over drivers (DRIVER_STATS) or road segments (ROAD_STATS)}; bank [N, ...]
    built with cfg (module docstring)."""
    per = jax.device_get(driver_statistics(bank, cfg))
    mask = np.asarray(per.pop("driver"), bool)
    out = {k: np.asarray(v, np.float64)[mask] for k, v in per.items()}
    host = jax.device_get(bank)
    lengths = np.linalg.norm(host.road_xy1 - host.road_xy0, axis=-1)
    for name, kind in (("lane_segment_length", types.LANE), ("edge_segment_length", types.ROAD_EDGE)):
        out[name] = lengths[(host.road_type == kind) & host.road_valid].astype(np.float64)
    widths = [_lane_widths(jax.tree.map(lambda x, i=i: x[i], host)) for i in range(host.road_valid.shape[0])]
    out["lane_width"] = np.concatenate(widths) if widths else np.zeros(0)
    return out


def summarise(stats: dict[str, np.ndarray]) -> dict[str, dict]:
    """{statistic: {n, mean, p10, p50, p90}} over the finite values."""
    out = {}
    for k, v in stats.items():
        v = v[np.isfinite(v)]
        out[k] = dict(n=int(v.size), mean=float(v.mean()) if v.size else float("nan"),
                      **{f"p{q}": float(np.percentile(v, q)) if v.size else float("nan") for q in (10, 50, 90)})
    return out
