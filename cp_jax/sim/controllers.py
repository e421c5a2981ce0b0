"""Non-learned controllers, evaluated inside the compiled step: log replay, constant velocity, IDM.

Each returns the next (xy [A, 2], yaw [A], speed [A]) for every agent slot; `env.step` selects per
agent by controller id.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.sim import dynamics, types
from cp_jax.sim.types import IDMParams, Scenario, SimConfig, SimState


def log_replay(scenario: Scenario, t_next: jax.Array):
    """Logged pose at step t_next, and whether it is valid ([A])."""
    xy = scenario.log_xy[:, t_next]
    yaw = scenario.log_yaw[:, t_next]
    speed = dynamics.log_speed(scenario.log_vel[:, t_next], yaw)
    return xy, yaw, speed, scenario.log_valid[:, t_next]


def constant_velocity(state: SimState, dt: float):
    """Keep speed and heading."""
    heading = jnp.stack([jnp.cos(state.yaw), jnp.sin(state.yaw)], -1)
    return state.xy + (state.speed * dt)[:, None] * heading, state.yaw, state.speed


def route_point(scenario: Scenario, i: jax.Array) -> jax.Array:
    """Route point [A, 2] of index i [A] on each agent's route."""
    return jnp.take_along_axis(scenario.route_xy, i[:, None, None], 1)[:, 0]


def route_position(scenario: Scenario, s: jax.Array, cfg: SimConfig):
    """Point [A, 2] and tangent yaw [A] at arc length s [A] along each agent's route."""
    last = jnp.maximum(scenario.route_len - 1, 0)
    u = jnp.clip(s / cfg.route_spacing, 0.0, last.astype(jnp.float32))
    i0 = jnp.minimum(jnp.floor(u).astype(jnp.int32), jnp.maximum(last - 1, 0))
    i1 = jnp.minimum(i0 + 1, last)
    frac = jnp.clip(u - i0, 0.0, 1.0)
    p0, p1 = route_point(scenario, i0), route_point(scenario, i1)
    d = p1 - p0
    return p0 + frac[:, None] * d, jnp.arctan2(d[:, 1], d[:, 0])


def project_on_route(scenario: Scenario, xy: jax.Array, cfg: SimConfig) -> jax.Array:
    """Arc length [A] of the route point nearest each agent's position xy [A, 2]."""
    d = jnp.linalg.norm(scenario.route_xy - xy[:, None, :], axis=-1)
    r = jnp.arange(cfg.max_route_points)
    d = jnp.where(r[None, :] < scenario.route_len[:, None], d, jnp.inf)
    return jnp.argmin(d, -1).astype(jnp.float32) * cfg.route_spacing


def route_arc(scenario: Scenario, xy: jax.Array, cfg: SimConfig) -> jax.Array:
    """Arc length [A] along each agent's route at xy [A, 2], continuous: project_on_route's point plus
    the offset along the route's direction there (within half a spacing either way); 0 without a
    route (route_len < 2)."""
    s = project_on_route(scenario, xy, cfg)
    i = jnp.round(s / cfg.route_spacing).astype(jnp.int32)
    last = jnp.maximum(scenario.route_len - 1, 0)
    tangent = route_point(scenario, jnp.minimum(i + 1, last)) - route_point(scenario, jnp.maximum(i - 1, 0))
    unit = tangent / jnp.maximum(jnp.linalg.norm(tangent, axis=-1, keepdims=True), 1e-6)
    half = 0.5 * cfg.route_spacing
    off = jnp.clip(jnp.sum((xy - route_point(scenario, i)) * unit, -1), -half, half)
    return jnp.where(scenario.route_len >= 2, s + off, 0.0)


def idm_accel(v, v0, gap, dv, p: IDMParams):
    """IDM acceleration [A] for speed v, desired speed v0, gap to the leader, closing speed dv."""
    ab = jnp.maximum(p.max_accel * p.comfort_decel, 1e-3)  # guards against zero parameters
    s_star = p.min_gap + jnp.maximum(0.0, v * p.headway + v * dv / (2 * jnp.sqrt(ab)))
    free = 1.0 - (jnp.maximum(v, 0.0) / jnp.maximum(v0, 0.1)) ** p.delta
    interaction = (s_star / jnp.maximum(gap, 0.1)) ** 2
    return p.max_accel * (free - interaction)


def idm(state: SimState, scenario: Scenario, p: IDMParams, cfg: SimConfig):
    """IDM along the lane route: yields to agents on the route ahead, and to higher-priority agents
    predicted (constant velocity, 1 s and 2 s ahead) to cross it; stops at red / amber lights of
    lanes ahead on the route.

    Returns (xy, yaw, speed, route_s) [A].

    Curves: each route point ahead caps the speed at sqrt(3 m/s^2 / curvature); the desired speed
    is lowered only as much as needed to brake comfortably down to that cap by the time it is
    reached.
    """
    a_n = cfg.max_agents
    w = cfg.idm_lookahead
    spacing = cfg.route_spacing
    last = jnp.maximum(scenario.route_len - 1, 0)
    i0 = jnp.floor(state.route_s / spacing).astype(jnp.int32)
    win = jnp.minimum(i0[:, None] + jnp.arange(1, w + 1)[None, :], last[:, None])  # [A, W]
    pts = jnp.take_along_axis(scenario.route_xy, win[..., None], 1)  # [A, W, 2]
    ahead = (win * spacing).astype(jnp.float32) - state.route_s[:, None]  # [A, W]
    win_ok = (win > i0[:, None]) & (ahead > 0)

    # Obstacles: current positions of alive others, and predicted positions of higher-priority ones.
    heading = jnp.stack([jnp.cos(state.yaw), jnp.sin(state.yaw)], -1)
    vel = state.speed[:, None] * heading
    horizons = (0.0, 1.0, 2.0)  # s: where others are now, and where they will be
    cands = jnp.stack([state.xy + vel * h for h in horizons], 0)  # [H, A, 2]
    others = state.alive[None, :] & ~jnp.eye(a_n, dtype=bool)  # [i, j]
    higher = scenario.priority[None, :] < scenario.priority[:, None]
    use = jnp.stack([others] + [others & higher] * (len(horizons) - 1), 0)  # [H, i, j]
    half_w = 0.5 * scenario.size[:, 1]
    lateral_tol = half_w[:, None] + half_w[None, :] + 0.3  # [i, j]
    d = jnp.linalg.norm(pts[None, :, None, :, :] - cands[:, None, :, None, :], axis=-1)  # [H,i,j,W]
    hit = use[..., None] & win_ok[None, :, None, :] & (d < lateral_tol[None, :, :, None])
    half_l = 0.5 * scenario.size[:, 0]
    gap_pts = ahead[None, :, None, :] - half_l[None, :, None, None] - half_l[None, None, :, None]
    gaps = jnp.where(hit, gap_pts, jnp.inf)
    gap_agents = jnp.min(gaps, axis=(0, 2, 3))
    # Leader speed along my heading (for the closing speed), from the nearest hit.
    j_lead = jnp.argmin(jnp.min(gaps, axis=(0, 3)), axis=1)
    lead_v = jnp.sum(vel[j_lead] * heading, -1)

    # Traffic lights: a lane ahead on the route (not the current one) showing stop / caution.
    cur_lane = jnp.take_along_axis(scenario.route_lane, i0[:, None], 1)
    lanes_ahead = jnp.take_along_axis(scenario.route_lane, win, 1)  # [A, W]
    t = jnp.minimum(state.t, cfg.log_steps - 1)
    light = scenario.tl_state[jnp.maximum(lanes_ahead, 0), t]
    red = win_ok & (lanes_ahead >= 0) & (lanes_ahead != cur_lane) & (
        (light == types.TL_STOP) | (light == types.TL_CAUTION)
    )
    gap_light = jnp.min(jnp.where(red, ahead - half_l[:, None], jnp.inf), -1)

    # The route's end is a stopped obstacle: IDM brakes smoothly to a halt there.
    gap_end = (last * spacing).astype(jnp.float32) - state.route_s - half_l
    gap_stop = jnp.minimum(gap_light, gap_end)
    gap = jnp.minimum(gap_agents, gap_stop)
    dv = jnp.where(gap_stop < gap_agents, state.speed, state.speed - lead_v)

    # Curve speed: at each window point v <= sqrt(3 m/s^2 / curvature); the desired speed now is
    # what still allows braking (comfortably) down to every such limit ahead.
    seg = jnp.diff(pts, axis=1)
    seg_yaw = jnp.arctan2(seg[..., 1], seg[..., 0])
    turn = jnp.abs(dynamics.wrap_angle(jnp.diff(seg_yaw, axis=1)))  # [A, W-2]
    real = (jnp.diff(win, axis=1)[:, 1:] > 0) & (jnp.diff(win, axis=1)[:, :-1] > 0)  # not past the end
    turn = jnp.where(real, turn, 0.0)
    v_curve = jnp.sqrt(3.0 * spacing / jnp.maximum(turn, 1e-4))
    reach = jnp.sqrt(v_curve**2 + 2.0 * p.comfort_decel * jnp.maximum(ahead[:, 1:-1], 0.0))
    v0 = jnp.minimum(p.desired_speed, jnp.min(jnp.where(win_ok[:, 1:-1], reach, jnp.inf), -1))

    acc = idm_accel(state.speed, v0, gap, dv, p)
    acc = jnp.clip(acc, -8.0, p.max_accel)
    v1 = jnp.maximum(state.speed + acc * cfg.dt, 0.0)
    s1 = jnp.minimum(state.route_s + 0.5 * (state.speed + v1) * cfg.dt, last * spacing)
    xy, yaw = route_position(scenario, s1, cfg)
    return xy, yaw, v1, s1
