"""Seeded procedural scenes: a layout, agents on its routes, and logs driven by IDM in the simulator.

`generate(seed)` returns a RawScene whose every agent has a logged trajectory (so log replay and
the Expert regime work) and whose goal is its final logged position, as in real data. Logs are made
by running the simulator's own IDM controller (yielding on the route, right of way by priority,
traffic lights); agents that collide or leave the road in that run are dropped and the run is
repeated, so the logs are collision-free.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.scenarios.builder import build_scenario, polyline_segments
from cp_jax.scenarios.procedural import layouts
from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import env, types

CAR_SIZE = (4.5, 2.0)
MIN_START_GAP = 8.0  # metres between agents' centres at t = 0


def _polyline_length(poly: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(poly, axis=0), axis=1))])


def _route_polyline(layout: layouts.Layout, route: list[int]) -> np.ndarray:
    pts = [np.asarray(layout.lanes[route[0]])]
    for lane in route[1:]:
        pts.append(np.asarray(layout.lanes[lane])[1:])
    return np.concatenate(pts)


def _point_at(poly: np.ndarray, s: float):
    """Point [2] and heading at arc length s along poly."""
    cum = _polyline_length(poly)
    s = float(np.clip(s, 0.0, cum[-1] - 1e-6))
    i = int(np.clip(np.searchsorted(cum, s, side="right") - 1, 0, len(poly) - 2))
    d = poly[i + 1] - poly[i]
    f = (s - cum[i]) / max(np.linalg.norm(d), 1e-9)
    return poly[i] + f * d, float(np.arctan2(d[1], d[0]))


def tl_program(layout: layouts.Layout, n_steps: int, rng: np.random.Generator) -> np.ndarray | None:
    """[n_lanes, T] light states: two phase groups alternating, 10 s period, amber 0.5 s."""
    if not layout.tl_lanes:
        return None
    period, green = 100, 45
    offset = int(rng.integers(0, period))
    t = (np.arange(n_steps) + offset) % period
    out = np.zeros((len(layout.lanes), n_steps), np.int32)
    for lane, phase in zip(layout.tl_lanes, layout.tl_phase, strict=True):
        local = (t + phase * period // 2) % period
        out[lane] = np.where(local < green, types.TL_GO, np.where(local < period // 2, types.TL_CAUTION, types.TL_STOP))
    return out


def _place_agents(layout, num_agents, rng, whole_route=False, min_gap=MIN_START_GAP):
    """Starts (xy, yaw, speed), routes and priorities, at least min_gap apart.

    By default an agent starts on its route's first (approach) lane, in its last 60%, so that it
    reaches the junction / merge / ring within the episode and meets the others there; with
    whole_route anywhere along the route.
    """
    occupied = [np.array(p[:2]) for p in layout.parked]
    agents = []
    order = rng.permutation(len(layout.routes))
    tries = 0
    while len(agents) < num_agents and tries < 40 * num_agents:
        route_id = int(order[tries % len(order)]) if tries < len(order) else int(rng.integers(len(layout.routes)))
        tries += 1
        route = layout.routes[route_id]
        poly = _route_polyline(layout, route)
        span = _polyline_length(poly)[-1] if whole_route else _polyline_length(np.asarray(layout.lanes[route[0]]))[-1]
        s = rng.uniform(0.0 if whole_route else 0.4 * span, span)
        xy, yaw = _point_at(poly, s)
        if any(np.linalg.norm(xy - o) < min_gap for o in occupied):
            continue
        occupied.append(xy)
        speed = rng.uniform(*layout.start_speed) if layout.route_priority[route_id] == 0 else rng.uniform(2.0, 8.0)
        agents.append((xy, yaw, speed, route, layout.route_priority[route_id], poly))
    return agents


_DEFAULT = types.SimConfig()


def _sizing(num_objects: int, layout: layouts.Layout, n_steps: int) -> types.SimConfig:
    n_seg = sum(max(len(p) - 1, 0) for p in layout.lanes) + sum(max(len(p) - 1, 0) for p in layout.edges)
    n_seg += sum(max(len(p) - 1, 0) for _, p in layout.others)
    return types.SimConfig(
        max_agents=max(8, int(2 ** np.ceil(np.log2(num_objects + 1)))),
        max_road_segments=int(256 * np.ceil((n_seg + 1) / 256)),
        max_lanes=int(16 * np.ceil((len(layout.lanes) + 1) / 16)),
        max_route_points=(_DEFAULT.max_route_points if layout.log_route_length is None
                          else int(np.ceil(layout.log_route_length / _DEFAULT.route_spacing)) + 8),
        log_steps=n_steps,
        episode_steps=n_steps - 1,
        obs_partners=4,
        obs_road=16,
        remove_on_event=False,
    )


@functools.partial(jax.jit, static_argnames=("cfg",))
def _idm_log(scenario, desired_speed, cfg: types.SimConfig):
    """Roll every controllable agent with IDM for the whole log; returns per-step poses and events."""
    params = types.default_params()
    params = params.replace(idm=params.idm.replace(desired_speed=desired_speed))
    cond = jnp.zeros((cfg.max_agents, types.COND_DIM)).at[:, 9].set(100.0)  # goal radius 0: never "at goal"
    ctrl = jnp.where(scenario.controllable, types.IDM, types.LOG)
    state = env.reset(scenario, jax.random.PRNGKey(0), cond, cfg)
    state = state.replace(controller=ctrl)

    def body(s, _):
        s, out = env.step(s, jnp.zeros((cfg.max_agents,), jnp.int32), scenario, params, cfg)
        return s, (s.xy, s.yaw, s.speed, out.collided, out.offroad)

    _, (xy, yaw, speed, collided, offroad) = jax.lax.scan(body, state, None, length=cfg.log_steps - 1)
    return xy, yaw, speed, collided, offroad


WARMUP_STEPS = 20  # IDM runs 2 s before the log starts, so starting speeds fit the traffic


def generate(
    seed: int,
    kind: str | None = None,
    num_agents: int = 12,
    log_steps: int = 91,
    max_rounds: int = 6,
    max_objects: int | None = None,
    max_road_segments: int | None = None,
) -> RawScene:
    """A procedural RawScene. kind: one of layouts.ALL_KINDS, or None for a seeded choice of LAYOUT_KINDS.

    The IDM run starts WARMUP_STEPS before the log, so the hard braking of agents that were placed
    too fast for their situation happens before the log. Agents that collide or leave the road in
    the run are dropped (those that yield first, half the offenders per round; after max_rounds
    all of them) and the run is repeated until it is clean. max_objects: when the clean scene still
    holds more objects (agents + parked cars: a narrow passage parks up to 5) than that, the last
    placed agents are dropped and the runs repeated (scenes that fit are unchanged). max_road_segments:
    a layout with more road segments than that (a long curved highway can exceed SimConfig's 2,048) is
    drawn again from the seed's generator until one fits (layouts that fit are unchanged).
    """
    rng = np.random.default_rng(seed)
    kind = kind or str(rng.choice(layouts.LAYOUT_KINDS))
    if kind not in layouts.ALL_KINDS:
        raise ValueError(f"unknown procedural kind {kind!r}; known: {layouts.ALL_KINDS}")
    layout = _fitting_layout(kind, rng, max_road_segments, seed)
    agents = _place_agents(layout, num_agents, rng)
    desired = [rng.uniform(*layout.desired_speed) for _ in agents]
    total = log_steps + WARMUP_STEPS
    tl = tl_program(layout, total, rng)
    name = f"{kind}_{seed}"
    raw, logs, agents, desired = _clean_run(layout, agents, desired, tl, total, name, max_rounds)
    if max_objects is not None and raw.num_objects > max_objects:
        keep = max(max_objects - len(layout.parked), 0)
        raw, logs, agents, desired = _clean_run(layout, agents[:keep], desired[:keep], tl, total, name, max_rounds)
    return _trim(_with_logs(raw, len(agents), *logs), WARMUP_STEPS)


def road_segment_count(layout: layouts.Layout) -> int:
    """The road segments `build_scenario` makes of a layout (lanes, edges, lines; zero-length dropped)."""
    polys = [*layout.lanes, *layout.edges, *(p for _, p in layout.others)]
    return sum(len(polyline_segments(p)[0]) for p in polys)


def _fitting_layout(kind: str, rng: np.random.Generator, max_road_segments: int | None, seed: int,
                    attempts: int = 20) -> layouts.Layout:
    """make_layout(kind, rng), drawn again while it has more than max_road_segments road segments."""
    for _ in range(attempts):
        layout = layouts.make_layout(kind, rng)
        if max_road_segments is None or road_segment_count(layout) <= max_road_segments:
            return layout
    raise ValueError(f"procedural {kind} scene of seed {seed}: no layout within max_road_segments="
                     f"{max_road_segments} in {attempts} draws (last had {road_segment_count(layout)})")


def _clean_run(layout, agents, desired, tl, total, name, max_rounds):
    """generate()'s IDM runs until no agent collides or leaves the road. -> (raw, (xy, yaw, speed)
    of the last run, agents, desired speeds)."""
    for round_ in range(10 * max_rounds):
        raw = _assemble(layout, agents, list(layout.parked), tl, total, name)
        cfg = _sizing(raw.num_objects, layout, total)
        speeds = np.zeros(cfg.max_agents, np.float32)
        speeds[: len(agents)] = desired
        xy, yaw, speed, collided, offroad = jax.device_get(
            _idm_log(build_scenario(raw, cfg), jnp.asarray(speeds), cfg)
        )
        bad = np.flatnonzero((collided.any(0) | offroad.any(0))[: len(agents)])
        if len(bad) == 0:
            break
        order = sorted(bad, key=lambda i: (-agents[i][4], -i))  # yielding ones, then later ones
        drop = set(order if round_ >= max_rounds else order[: max(1, len(bad) // 2)])
        agents = [a for i, a in enumerate(agents) if i not in drop]
        desired = [d for i, d in enumerate(desired) if i not in drop]
    return raw, (xy, yaw, speed), agents, desired


def _trim(raw: RawScene, start: int) -> RawScene:
    """Drop the first `start` steps of every time series (the IDM warm-up)."""
    moved = np.linalg.norm(raw.log_xy[:, -1] - raw.log_xy[:, start], axis=-1)
    return dataclasses.replace(
        raw, log_xy=raw.log_xy[:, start:], log_yaw=raw.log_yaw[:, start:], log_vel=raw.log_vel[:, start:],
        log_valid=raw.log_valid[:, start:], tl_state=None if raw.tl_state is None else raw.tl_state[:, start:],
        controllable=raw.controllable & (moved > 2.0),
    )


def _assemble(layout, agents, parked, tl, n_steps, name) -> RawScene:
    """RawScene with constant logs at the start pose; goals at each route's end (for the IDM run)."""
    n = len(agents) + len(parked)
    log_xy = np.zeros((n, n_steps, 2))
    log_yaw = np.zeros((n, n_steps))
    log_vel = np.zeros((n, n_steps, 2))
    size = np.tile(np.array([CAR_SIZE]), (n, 1))
    goal = np.zeros((n, 2))
    routes, priority = [], []
    for i, (xy, yaw, speed, route, prio, poly) in enumerate(agents):
        log_xy[i] = xy
        log_yaw[i] = yaw
        log_vel[i] = speed * np.array([np.cos(yaw), np.sin(yaw)])
        goal[i] = poly[-1]
        routes.append(list(route))
        priority.append(prio)
    for j, (x, y, yaw, length, width) in enumerate(parked):
        i = len(agents) + j
        log_xy[i] = (x, y)
        log_yaw[i] = yaw
        size[i] = (length, width)
        goal[i] = (x, y)
        routes.append([])
        priority.append(0)
    controllable = np.arange(n) < len(agents)
    return RawScene(
        name=name,
        lanes=[np.asarray(p) for p in layout.lanes],
        lane_succ=[list(s) for s in layout.lane_succ],
        lane_left=list(layout.lane_left),
        lane_right=list(layout.lane_right),
        edges=[np.asarray(p) for p in layout.edges],
        others=list(layout.others),
        log_xy=log_xy,
        log_yaw=log_yaw,
        log_vel=log_vel,
        log_valid=np.ones((n, n_steps), bool),
        size=size,
        obj_type=np.zeros(n, np.int32),
        goal=goal,
        controllable=controllable,
        routes=routes,
        priority=np.asarray(priority, np.int32),
        tl_state=tl,
        sdc=0,
    )


def _with_logs(raw: RawScene, n_agents: int, xy, yaw, speed) -> RawScene:
    """Fill the IDM run into the agents' logs; goal = final logged position."""
    log_xy, log_yaw, log_vel = raw.log_xy.copy(), raw.log_yaw.copy(), raw.log_vel.copy()
    log_xy[:n_agents, 1:] = np.moveaxis(xy[:, :n_agents], 0, 1)
    log_yaw[:n_agents, 1:] = np.moveaxis(yaw[:, :n_agents], 0, 1)
    v = np.moveaxis(speed[:, :n_agents], 0, 1)
    heading = np.stack([np.cos(log_yaw[:n_agents, 1:]), np.sin(log_yaw[:n_agents, 1:])], -1)
    log_vel[:n_agents, 1:] = v[..., None] * heading
    goal = raw.goal.copy()
    goal[:n_agents] = log_xy[:n_agents, -1]
    # Agents that barely moved are "parked" for control purposes (as for real data).
    moved = np.linalg.norm(log_xy[:, -1] - log_xy[:, 0], axis=-1)
    controllable = raw.controllable & (moved > 2.0)
    return RawScene(
        **{
            **raw.__dict__,
            "log_xy": log_xy,
            "log_yaw": log_yaw,
            "log_vel": log_vel,
            "goal": goal,
            "controllable": controllable,
        }
    )


def densify(raw: RawScene, road_points: int) -> RawScene:
    """Resample every road polyline at one spacing so the scene has about road_points segments
    (Waymo's road graph is sampled every 0.5 m; the benchmark's 20,000-point scenes use this)."""
    polys = list(raw.lanes) + list(raw.edges) + [p for _, p in raw.others]
    total = sum(_polyline_length(np.asarray(p))[-1] for p in polys)
    spacing = total / max(road_points - 2 * len(polys), 1)

    def resample(poly):
        poly = np.asarray(poly, np.float64)
        cum = _polyline_length(poly)
        n = max(2, int(np.ceil(cum[-1] / spacing)) + 1)
        q = np.linspace(0.0, cum[-1], n)
        return np.stack([np.interp(q, cum, poly[:, 0]), np.interp(q, cum, poly[:, 1])], -1)

    return RawScene(
        **{
            **raw.__dict__,
            "lanes": [resample(p) for p in raw.lanes],
            "edges": [resample(p) for p in raw.edges],
            "others": [(k, resample(p)) for k, p in raw.others],
        }
    )


def benchmark_scene(num_agents: int, road_points: int, seed: int = 0, kind: str = "four_way") -> RawScene:
    """A large scene for throughput measurements: one layout densified to about road_points
    segments, num_agents cars spread over all its routes (no overlaps where they fit; the rest
    anywhere on a lane), constant-velocity logs (no IDM run, so it is fast to make)."""
    rng = np.random.default_rng(seed)
    layout = layouts.make_layout(kind, rng)
    agents = _place_agents(layout, num_agents, rng, whole_route=True, min_gap=6.0)
    while len(agents) < num_agents:
        agents += _place_agents(layout, num_agents - len(agents), rng, whole_route=True, min_gap=0.0)
    n_steps = 91
    raw = _assemble(
        layouts.Layout(**{**layout.__dict__, "parked": []}), agents, [], None, n_steps, f"bench_{kind}_{seed}"
    )
    t = np.arange(n_steps) * 0.1
    raw.log_xy = raw.log_xy + raw.log_vel * t[None, :, None]
    return densify(raw, road_points)
