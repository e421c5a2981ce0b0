"""Tiny hand-made worlds for tests: the expected answers are obvious."""

from __future__ import annotations

import numpy as np

from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import types

ROAD_HALF_WIDTH = 4.0  # a straight two-lane road along +x, y in [-4, 4]


def straight_road(
    starts: list[tuple[float, float, float, float]],
    goals: list[tuple[float, float]] | None = None,
    length: float = 200.0,
    steps: int = 21,
    name: str = "straight",
) -> RawScene:
    """A road from x=0 to x=length, edges at y = +-4, one eastbound lane at y=-2 and one westbound
    at y=+2. starts: (x, y, yaw, speed) per agent; logs are constant-velocity straight lines."""
    n = len(starts)
    st = np.asarray(starts, np.float64)
    xs = np.linspace(0.0, length, 41)
    east = np.stack([xs, np.full_like(xs, -2.0)], -1)
    west = east[::-1] * np.array([1.0, -1.0])
    edges = [
        np.stack([xs, np.full_like(xs, -ROAD_HALF_WIDTH)], -1),  # south edge, eastward: road on left
        np.stack([xs[::-1], np.full_like(xs, ROAD_HALF_WIDTH)], -1),  # north edge, westward
    ]
    t = np.arange(steps) * 0.1
    heading = np.stack([np.cos(st[:, 2]), np.sin(st[:, 2])], -1)
    log_xy = st[:, None, :2] + (st[:, 3:4, None] * t[None, :, None]) * heading[:, None, :]
    log_vel = np.broadcast_to((st[:, 3:4] * heading)[:, None, :], (n, steps, 2)).copy()
    if goals is None:
        goals = [tuple(log_xy[i, -1]) for i in range(n)]
    routes = [[0] if np.cos(s[2]) > 0 else [1] for s in st]
    return RawScene(
        name=name,
        lanes=[east, west],
        lane_succ=[[], []],
        lane_left=[-1, -1],
        lane_right=[-1, -1],
        edges=edges,
        others=[(types.ROAD_LINE, np.array([[0.0, 0.0], [length, 0.0]]))],
        log_xy=log_xy,
        log_yaw=np.broadcast_to(st[:, 2:3], (n, steps)).copy(),
        log_vel=log_vel,
        log_valid=np.ones((n, steps), bool),
        size=np.tile([[4.5, 2.0]], (n, 1)),
        obj_type=np.zeros(n, np.int32),
        goal=np.asarray(goals, np.float64),
        controllable=np.ones(n, bool),
        routes=routes,
    )


def small_config(**overrides) -> types.SimConfig:
    """The small static sizes the tests share (one compiled program per distinct config)."""
    values = dict(
        max_agents=8, max_road_segments=256, max_lanes=4, log_steps=21, episode_steps=20,
        obs_partners=4, obs_road=32, grid_size=8, max_route_points=64, idm_lookahead=16,
    )
    values.update(overrides)
    return types.SimConfig(**values)
