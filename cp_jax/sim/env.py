"""reset / step / rollout, and auto-reset over a device-resident scenario bank.

All functions are pure and jit / vmap / scan safe; `cfg` is static (hashable), everything else is
a pytree of arrays. Batch with `jax.vmap` over the leading axis of state and scenario.

Why one module of ~520 lines: reset, step, the one observe -> act -> step (`policy_step`) and the
rollouts that scan it are the simulator's public surface and call each other; the physics, geometry,
observation and reward they compose live in their own modules beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.sim import controllers, dynamics, geometry, types
from cp_jax.sim import reward as reward_lib
from cp_jax.sim.observation import observe, observe_agents
from cp_jax.sim.types import INF_T, Obs, Scenario, SimConfig, SimParams, SimState, StepOut

__all__ = [
    "reset", "perturb_start", "step", "observe", "observe_agents", "rollout", "policy_step", "Act", "Trajectory",
    "stack_states", "rollout_rows", "replay_log", "default_controllers", "set_controllers",
    "stack_scenarios", "take_scenario", "auto_reset",
]


def default_controllers(scenario: Scenario, cond: jax.Array, controlled=types.POLICY) -> jax.Array:
    """Controller ids [A]: `controlled` for controllable agents, LOG for the rest.

    Agents are not controlled (replayed from the log) when they are not valid at t = 0, start
    overlapping another agent, start within their goal radius, or are parked (goal == start).
    """
    xy0 = scenario.log_xy[:, 0]
    valid0 = scenario.agent_valid & scenario.log_valid[:, 0]
    overlap = geometry.overlap_matrix(xy0, scenario.log_yaw[:, 0], scenario.size)
    starts_overlapping = jnp.any(overlap & valid0[None, :], axis=1)
    goal_dist = jnp.linalg.norm(scenario.goal - xy0, axis=-1)
    at_goal = goal_dist < cond[:, 0]
    ok = scenario.controllable & valid0 & ~starts_overlapping & ~at_goal & (goal_dist > 0.1)
    return jnp.where(ok, controlled, types.LOG).astype(jnp.int32)


def reset(
    scenario: Scenario,
    key: jax.Array,
    cond: jax.Array,
    cfg: SimConfig,
    controller: jax.Array | None = None,
) -> SimState:
    """State at log frame 0. cond [A, COND_DIM] (or [COND_DIM], broadcast); controller [A] ids
    (default: `default_controllers`; ineligible agents are always forced to LOG).

    At most cfg.max_controlled agents per scene are not LOG: the first ones in index order keep
    their controller, any further non-log agent replays its log (see `set_controllers`).
    """
    a = cfg.max_agents
    cond = jnp.broadcast_to(jnp.asarray(cond, jnp.float32), (a, types.COND_DIM))
    eligible = default_controllers(scenario, cond, types.POLICY) == types.POLICY
    if controller is None:
        controller = jnp.full((a,), types.POLICY, jnp.int32)
    controller = jnp.where(eligible, jnp.asarray(controller, jnp.int32), types.LOG)
    controller, ctrl_rows = _limit_controlled(controller, cfg)
    xy = scenario.log_xy[:, 0]
    yaw = scenario.log_yaw[:, 0]
    never = jnp.full((a,), INF_T, jnp.int32)
    zeros = jnp.zeros((a,), jnp.float32)
    return SimState(
        t=jnp.zeros((), jnp.int32),
        xy=xy,
        yaw=yaw,
        speed=dynamics.log_speed(scenario.log_vel[:, 0], yaw),
        accel=zeros,
        steer=zeros,
        lat_accel=zeros,
        route_s=controllers.project_on_route(scenario, xy, cfg),
        alive=scenario.agent_valid & scenario.log_valid[:, 0],
        removed=jnp.zeros((a,), bool),
        goal_t=never,
        first_collision_t=never,
        first_offroad_t=never,
        collision_partner=jnp.full((a,), -1, jnp.int32),
        cond=cond,
        controller=controller,
        ctrl_rows=ctrl_rows,
        key=key,
    )


def perturb_start(state: SimState, scenario: Scenario, key: jax.Array, offset: float, heading: float,
                  speed_scale: float, cfg: SimConfig) -> SimState:
    """A fresh state (`reset`) with every POLICY agent's start moved sideways by U(-offset, offset) m,
    turned by U(-heading, heading) rad and its speed scaled by U(1, speed_scale): starts off the
    centreline, askew and faster, as real drivers start. An agent whose moved box would be off the
    road or overlap another agent's box (moved or not) keeps its logged start. [A] everywhere."""
    a = cfg.max_agents
    k_off, k_yaw, k_speed = jax.random.split(key, 3)
    move = (state.controller == types.POLICY) & state.alive
    side = jax.random.uniform(k_off, (a,), minval=-1.0, maxval=1.0) * offset
    normal = jnp.stack([-jnp.sin(state.yaw), jnp.cos(state.yaw)], -1)
    xy = jnp.where(move[:, None], state.xy + side[:, None] * normal, state.xy)
    yaw = jnp.where(move, state.yaw + jax.random.uniform(k_yaw, (a,), minval=-1.0, maxval=1.0) * heading, state.yaw)
    both_xy, both_yaw = jnp.concatenate([xy, state.xy]), jnp.concatenate([yaw, state.yaw])
    both_size = jnp.concatenate([scenario.size, scenario.size])
    hits = geometry.overlap_matrix(both_xy, both_yaw, both_size)[:a]  # new boxes vs new and logged boxes
    others = state.alive & ~jnp.eye(a, dtype=bool)
    crowded = jnp.any(hits[:, :a] & others, -1) | jnp.any(hits[:, a:] & others, -1)
    keep = move & ~crowded & ~is_offroad(xy, yaw, scenario, cfg)
    xy = jnp.where(keep[:, None], xy, state.xy)
    yaw = jnp.where(keep, yaw, state.yaw)
    scale = jax.random.uniform(k_speed, (a,), minval=1.0, maxval=speed_scale)
    return state.replace(xy=xy, yaw=yaw, speed=jnp.where(move, state.speed * scale, state.speed),
                         route_s=controllers.project_on_route(scenario, xy, cfg))


def set_controllers(state: SimState, controller: jax.Array, cfg: SimConfig) -> SimState:
    """state with new controller ids [A] and ctrl_rows to match: the way to change controllers after
    `reset` (a bare state.replace(controller=...) leaves ctrl_rows stale, which matters when
    cfg.max_controlled < max_agents). Non-log agents beyond the first max_controlled (index order)
    are set to LOG. Eligibility is not re-checked: `reset` applies it."""
    controller, ctrl_rows = _limit_controlled(jnp.asarray(controller, jnp.int32), cfg)
    return state.replace(controller=controller, ctrl_rows=ctrl_rows)


def _limit_controlled(controller: jax.Array, cfg: SimConfig) -> tuple[jax.Array, jax.Array]:
    """(controller [A] with non-log agents beyond the first C forced to LOG, ctrl_rows [C]): the
    non-log agents in index order, then LOG agents in index order as padding."""
    non_log = controller != types.LOG
    if cfg.rows_only:
        extra = non_log & (jnp.cumsum(non_log) > cfg.num_controlled)
        controller = jnp.where(extra, types.LOG, controller)
        non_log = non_log & ~extra
    rows = jnp.argsort((~non_log).astype(jnp.int32), stable=True)[: cfg.num_controlled]
    return controller, rows.astype(jnp.int32)


def _actions(action: jax.Array, params: SimParams, cfg: SimConfig):
    """(accel, steer) [A] from discrete indices (clipped to the grid) or continuous values (clipped
    to the grid's range, so a steer beyond +-pi/2 cannot flip the tangent)."""
    if cfg.discrete_actions:
        n = params.accel_grid.shape[0] * params.steer_grid.shape[0]
        return dynamics.decode_discrete(jnp.clip(action, 0, n - 1), params.accel_grid, params.steer_grid)
    accel = jnp.clip(action[..., 0], params.accel_grid[0], params.accel_grid[-1])
    steer = jnp.clip(action[..., 1], params.steer_grid[0], params.steer_grid[-1])
    return accel, steer


def is_offroad(xy, yaw, scenario: Scenario, cfg: SimConfig, rows: jax.Array | None = None) -> jax.Array:
    """[A] bool: any box corner of the agent is beyond a road edge. Pedestrians are exempt.

    With rows [C] (agent indices), xy [C, 2] and yaw [C] are those agents' poses -> [C]."""
    size, obj_type = scenario.size, scenario.obj_type
    if rows is not None:
        size, obj_type = size[rows], obj_type[rows]
    corners = geometry.box_corners(xy, yaw, size)  # [A, 4, 2]
    sd = geometry.edge_distance(corners, scenario, cfg, anchor=xy)  # candidates of the centre's cell
    # A scene without any road edge has nothing to leave: +inf (no candidate) is on-road.
    return jnp.any((sd > 0.0) & jnp.isfinite(sd), -1) & (obj_type != types.PEDESTRIAN)


def step(
    state: SimState, action: jax.Array, scenario: Scenario, params: SimParams, cfg: SimConfig
) -> tuple[SimState, StepOut]:
    """Advance every agent one step. action: int [A] (discrete) or float [A, 2] (accel, steer);
    only agents with controller POLICY / OTHER_POLICY read it.

    With cfg.max_controlled < max_agents, events and rewards are computed for the C agents of
    state.ctrl_rows only (every non-log agent, then log padding): a listed agent's collisions with
    anyone, off-road and reward; unlisted (log-replayed) agents get no events and reward 0. Non-log
    agents get the same values as with max_controlled None; log-replayed agents are never removed
    anyway (use max_controlled None, as `replay_log` does, to check the logs themselves).
    """
    t1 = state.t + 1
    t_log = jnp.minimum(t1, cfg.log_steps - 1)
    ctrl = state.controller
    accel_cmd, steer_cmd = _actions(action, params, cfg)

    # Candidate next poses from every controller, selected per agent.
    length = scenario.size[:, 0]
    accel_act, steer_act, delta = dynamics.actuate(
        accel_cmd, steer_cmd, state.accel, state.steer, state.speed, length, params.wheelbase_frac,
        params.actuator_lag, params.max_lat_accel, params.steer_grid[-1],
    )
    b_xy, b_yaw, b_v = dynamics.bicycle_step(
        state.xy, state.yaw, state.speed, accel_act, delta, length,
        params.wheelbase_frac, params.max_speed, params.max_reverse, cfg.dt,
    )
    accel_act = dynamics.settle(accel_act, state.speed, b_v, cfg.dt)
    l_xy, l_yaw, l_v, l_valid = controllers.log_replay(scenario, t_log)
    c_xy, c_yaw, c_v = controllers.constant_velocity(state, cfg.dt)
    has_route = scenario.route_len >= 2
    is_policy = (ctrl == types.POLICY) | (ctrl == types.OTHER_POLICY)
    # IDM needs a route (built from lanes, else from the agent's logged path): an agent without one (a
    # parked car) or with IDM compiled out replays its log.
    is_log = (ctrl == types.LOG) | ((ctrl == types.IDM) & (~has_route | (not cfg.enable_idm)))
    pick = lambda p, lg, c: jnp.where(  # noqa: E731
        _bcast(is_policy, p), p, jnp.where(_bcast(is_log, lg), lg, c)
    )
    xy, yaw, speed = pick(b_xy, l_xy, c_xy), pick(b_yaw, l_yaw, c_yaw), pick(b_v, l_v, c_v)
    route_s = state.route_s
    if cfg.enable_idm:
        i_xy, i_yaw, i_v, i_s = controllers.idm(state, scenario, params.idm, cfg)
        use_idm = (ctrl == types.IDM) & has_route
        xy = jnp.where(use_idm[:, None], i_xy, xy)
        yaw, speed = jnp.where(use_idm, i_yaw, yaw), jnp.where(use_idm, i_v, speed)
        route_s = jnp.where(use_idm, i_s, route_s)

    # Who is in the world after the step; removed agents stay frozen where they were.
    active = state.alive
    alive = jnp.where(is_log, scenario.agent_valid & l_valid, state.alive) & ~state.removed
    moving = alive & active
    xy = jnp.where(moving[:, None], xy, jnp.where(is_log[:, None] & alive[:, None], l_xy, state.xy))
    yaw = jnp.where(moving, yaw, jnp.where(is_log & alive, l_yaw, state.yaw))
    speed = jnp.where(alive, speed, 0.0)

    # Events and reward: for every agent, or (cfg.rows_only) for the rows of state.ctrl_rows.
    goal_dist = jnp.linalg.norm(xy - scenario.goal, axis=-1)
    at_goal = alive & (goal_dist < state.cond[:, 0]) & (jnp.abs(speed) <= state.cond[:, 9])
    accel = jnp.where(is_policy, accel_act, (speed - state.speed) / cfg.dt)
    lat_accel = speed * dynamics.wrap_angle(yaw - state.yaw) / cfg.dt
    first_goal = at_goal & (state.goal_t == INF_T)  # the goal bonus is paid once
    kin = dict(
        speed=speed, accel=accel, lat_accel=lat_accel,
        jerk_long=(accel - state.accel) / cfg.dt, jerk_lat=(lat_accel - state.lat_accel) / cfg.dt,
    )
    if cfg.rows_only:
        partner, offroad, rew = _row_events(state, xy, yaw, alive, kin, first_goal, scenario, cfg)
        collided = partner >= 0
    else:
        overlap = geometry.overlap_matrix(xy, yaw, scenario.size) & alive[None, :] & alive[:, None]
        # One plain max-reduce gives both the partner (highest overlapping index) and the collision flag
        # (one pass over the [A, A] matrix; argmax's variadic reduce is much slower on XLA:CPU).
        partner = jnp.max(jnp.where(overlap, jnp.arange(cfg.max_agents, dtype=jnp.int32), -1), -1)
        collided = partner >= 0
        offroad = is_offroad(xy, yaw, scenario, cfg) & alive
        heading_err, lateral, _, on_lane = geometry.lane_frame(xy, yaw, scenario, cfg)
        lane = reward_lib.Kinematics(heading_err=heading_err, lateral=lateral, on_lane=on_lane, **kin)
        rew = reward_lib.reward(state.cond, lane, collided, offroad, first_goal, cfg.dt)
    rew = jnp.where(active & alive, rew, 0.0)

    # Removal and bookkeeping (log-replayed agents are never removed).
    event = at_goal | ((collided | offroad) if cfg.remove_on_event else False)
    removed_now = event & active & ~is_log
    first = lambda old, hit: jnp.where(hit & (old == INF_T), t1, old)  # noqa: E731
    new_collision = collided & (state.first_collision_t == INF_T)
    truncated = (t1 >= cfg.episode_steps) & alive & ~removed_now
    new_state = state.replace(
        t=t1,
        xy=xy,
        yaw=yaw,
        speed=speed,
        accel=accel,
        steer=jnp.where(is_policy, steer_act, 0.0),
        lat_accel=lat_accel,
        route_s=route_s,
        alive=alive & ~removed_now,
        removed=state.removed | removed_now,
        goal_t=first(state.goal_t, at_goal),
        first_collision_t=first(state.first_collision_t, collided),
        first_offroad_t=first(state.first_offroad_t, offroad),
        collision_partner=jnp.where(new_collision, partner, state.collision_partner),
    )
    out = StepOut(
        reward=rew,
        terminated=removed_now,
        truncated=truncated,
        collided=collided,
        offroad=offroad,
        at_goal=at_goal,
        active=active,
    )
    return new_state, out


def _row_events(state: SimState, xy, yaw, alive, kin: dict, first_goal, scenario: Scenario, cfg: SimConfig):
    """Collision partner [A], off-road [A] and reward [A] when only the C rows of state.ctrl_rows
    are checked (cfg.rows_only).

    A listed agent is checked against every agent (SAT [C, A], geometry.overlap_rows: no [A, A]
    work); off-road and the reward (lane frame included) are computed for listed agents only.
    Unlisted agents get partner -1, off-road False and reward 0, even when a listed agent hits them.
    """
    a, rows = cfg.max_agents, state.ctrl_rows
    r_xy, r_yaw, r_alive = xy[rows], yaw[rows], alive[rows]
    overlap = geometry.overlap_rows(xy, yaw, scenario.size, rows) & r_alive[:, None] & alive[None, :]  # [C, A]
    partner = jnp.max(jnp.where(overlap, jnp.arange(a, dtype=jnp.int32), -1), -1)  # [C]
    offroad = is_offroad(r_xy, r_yaw, scenario, cfg, rows) & r_alive
    heading_err, lateral, _, on_lane = geometry.lane_frame(r_xy, r_yaw, scenario, cfg)
    lane = reward_lib.Kinematics(
        heading_err=heading_err, lateral=lateral, on_lane=on_lane, **{k: v[rows] for k, v in kin.items()}
    )
    rew = reward_lib.reward(state.cond[rows], lane, partner >= 0, offroad, first_goal[rows], cfg.dt)
    scatter = lambda v, fill: jnp.full((a,), fill, v.dtype).at[rows].set(v, unique_indices=True)  # noqa: E731
    return scatter(partner, -1), scatter(offroad, False), scatter(rew, 0.0)


def _bcast(mask: jax.Array, like: jax.Array) -> jax.Array:
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


@struct.dataclass
class Trajectory:
    """Per-step outputs of a rollout, stacked on a leading time axis [N, ...]."""

    action: jax.Array
    out: StepOut
    running: jax.Array  # [N] bool: the step ran (the episode and stop_t not reached; else the state froze)
    obs: Obs | None = None
    state: SimState | None = None  # snapshots: the state *before* each step (every keep_every-th), key included
    extras: Any = None  # what the policy returned beside its action (Act.extras), per step


class Act(NamedTuple):
    """A policy's full answer for one step (a plain policy returns just the action)."""

    action: jax.Array
    memory: Any = None  # the policy's own state carried to the next step (e.g. an LSTM's), or None
    extras: Any = None  # anything to keep per step (values, one row's observation, ...), or None


PolicyFn = Callable[..., "jax.Array | Act"]


def policy_step(policy_fn: PolicyFn, policy_params, state: SimState, scenario: Scenario, params: SimParams,
                cfg: SimConfig, key: jax.Array, memory=None) -> tuple[SimState, StepOut, Obs, Act]:
    """One observe -> act -> step: every rollout's step. state and scenario are one scene's, or a batch
    [B, ...] (state.t [B]; observe and step vmapped, the policy called once on obs [B, A, ...]).
    policy_fn and memory as in `rollout`; key is the policy's. Returns (next state, StepOut, obs, Act)."""
    batched = state.t.ndim == 1
    obs = jax.vmap(lambda s, sc: observe(s, sc, cfg))(state, scenario) if batched else observe(state, scenario, cfg)
    res = policy_fn(policy_params, obs, state, key) if memory is None else policy_fn(policy_params, obs, state, key,
                                                                                      memory)
    act = res if isinstance(res, Act) else Act(res, memory)
    if batched:
        nxt, out = jax.vmap(lambda s, a, sc: step(s, a, sc, params, cfg))(state, act.action, scenario)
    else:
        nxt, out = step(state, act.action, scenario, params, cfg)
    return nxt, out, obs, act


def rollout(
    policy_fn: PolicyFn,
    policy_params,
    state: SimState,
    scenario: Scenario,
    params: SimParams,
    cfg: SimConfig,
    num_steps: int,
    keep_obs: bool = False,
    keep_states: bool = False,
    *,
    memory=None,
    stop_t: jax.Array | None = None,
    keep_every: int = 1,
) -> tuple[SimState, Trajectory]:
    """lax.scan of `policy_step` (observe -> policy -> step) for num_steps (static): the rollout of the
    project (evaluation, CounterPlay's records, branches and gate, and the benchmark drive with it; PPO's
    rollout scans the same `policy_step` over its batch of envs, restarting finished ones).

    policy_fn(policy_params, obs, state, key) -> action [A] (or an `Act`); with `memory` given (the
    policy's own carry, e.g. an LSTM's): policy_fn(policy_params, obs, state, key, memory) -> Act.
    Its key is split off state.key each step, so a rollout is a function of the starting state alone:
    driving again from a snapshot (Trajectory.state, kept *before* the split) replays it exactly, and
    branches given one key share their random numbers. Steps at or past cfg.episode_steps, or from
    stop_t [] on, leave the state unchanged (Trajectory.running is False there), so rollouts from
    different start steps share one static length. keep_every k > 1 (with keep_states): only the state
    before every k-th step is kept [ceil(num_steps / k), ...], and the run is rounded up to whole
    chunks of k steps (num_steps must then reach the episode's end; the extra steps are frozen).
    """

    def body(carry, _):
        snapshot, mem = carry
        running = snapshot.t < cfg.episode_steps
        if stop_t is not None:
            running = running & (snapshot.t < stop_t)
        key, k_act = jax.random.split(snapshot.key)
        nxt, out, obs, act = policy_step(policy_fn, policy_params, snapshot.replace(key=key), scenario, params, cfg,
                                         k_act, mem)
        nxt = jax.tree.map(lambda new, old: jnp.where(running, new, old), nxt, snapshot)
        traj = Trajectory(action=act.action, out=out, running=running, obs=obs if keep_obs else None,
                          state=snapshot if keep_states and keep_every == 1 else None, extras=act.extras)
        return (nxt, act.memory), traj

    if keep_every == 1 or not keep_states:
        (final, _), traj = jax.lax.scan(body, (state, memory), None, length=num_steps)
        return final, traj
    if num_steps < cfg.episode_steps:
        raise ValueError(f"rollout(keep_every={keep_every}) runs whole chunks: num_steps ({num_steps}) must reach "
                         f"the episode's end ({cfg.episode_steps})")

    def chunk(carry, _):
        nxt, traj = jax.lax.scan(body, carry, None, length=keep_every)
        return nxt, (carry[0], traj)

    n_chunks = -(-num_steps // keep_every)
    (final, _), (snapshots, traj) = jax.lax.scan(chunk, (state, memory), None, length=n_chunks)
    traj = jax.tree.map(lambda x: x.reshape((n_chunks * keep_every,) + x.shape[2:])[:num_steps], traj)
    return final, traj.replace(state=snapshots)


def stack_states(traj_states: SimState, final: SimState) -> SimState:
    """[T + 1, ...] states of an episode: a rollout's per-step snapshots [T, ...] (Trajectory.state, the
    state before each step) followed by the final state."""
    return jax.tree.map(lambda xs, x: jnp.concatenate([xs, x[None]]), traj_states, final)


def replay_log(scenario: Scenario, params: SimParams, cfg: SimConfig) -> tuple[SimState, Trajectory]:
    """Everyone replays its log for cfg.episode_steps: the sanity check of data and geometry (a clean
    log should flag no collision or off-road). Event times are in the final state
    (first_collision_t / first_offroad_t < INF_T: ever flagged). Events are checked for every agent
    and pair whatever cfg.max_controlled (it runs with max_controlled None)."""
    cfg = dataclasses.replace(cfg, max_controlled=None)
    controller = jnp.full((cfg.max_agents,), types.LOG, jnp.int32)
    state = reset(scenario, jax.random.PRNGKey(0), jnp.zeros(types.COND_DIM), cfg, controller)
    no_action = lambda p, obs, s, key: jnp.zeros((cfg.max_agents,), jnp.int32)  # noqa: E731 - ignored by LOG
    return rollout(no_action, None, state, scenario, params, cfg, cfg.episode_steps)


# ----------------------------------------------------------------------------- scenario bank


def stack_scenarios(scenarios: list[Scenario]) -> Scenario:
    """A bank: scenarios stacked on a leading axis [N, ...] (all built with the same SimConfig)."""
    return jax.tree.map(lambda *x: jnp.stack(x), *scenarios)


def take_scenario(bank: Scenario, idx: jax.Array) -> Scenario:
    """Scenario idx [] of a bank (a gather; under vmap, one per batch element)."""
    return jax.tree.map(lambda x: x[idx], bank)


def group_bank(bank: Scenario, groups: int) -> Scenario:
    """[S, ...] -> [groups, S / groups, ...]: group g holds scenes g * S / groups onwards (a bank for
    bank_groups = groups). S must be a multiple of groups."""
    n = jax.tree.leaves(bank)[0].shape[0]
    if n % groups:
        raise ValueError(f"bank_groups ({groups}) must divide the number of scenes in the bank ({n})")
    return jax.tree.map(lambda x: x.reshape(groups, n // groups, *x.shape[1:]), bank)


def take_scenes(bank: Scenario, idx: jax.Array, groups: int = 1, field: str = "bank_groups") -> Scenario:
    """The batch's scenes [B, ...]: bank [S, ...] and idx [B] into it, or for groups = G > 1 a grouped
    bank [G, S / G, ...] (`group_bank`) and idx [B] into each element's own group (element b takes
    group b G // B: consecutive blocks of B / G). Batched over the group axis, so a bank split over
    devices along it is read where it lies."""
    grouped_shape = bank.log_xy.ndim == 5  # [G, S / G, A, T, 2] vs [S, A, T, 2]
    if grouped_shape != (groups > 1) or (grouped_shape and bank.log_xy.shape[0] != groups):
        raise ValueError(f"{field} ({groups}) does not match the bank's leading axes {bank.log_xy.shape[:-3]} "
                         f"(group it with env.group_bank(bank, {groups}), or not)")
    if groups == 1:
        return jax.vmap(take_scenario, in_axes=(None, 0))(bank, idx)
    b = idx.shape[0]
    if b % groups:
        raise ValueError(f"{field} ({groups}) must divide the batch ({b})")
    grouped = jax.vmap(jax.vmap(take_scenario, in_axes=(None, 0)))(bank, idx.reshape(groups, -1))
    return jax.tree.map(lambda x: x.reshape(b, *x.shape[2:]), grouped)


def bank_size(bank: Scenario, groups: int = 1) -> int:
    """Scenes per group (the whole bank's S for groups = 1)."""
    return jax.tree.leaves(bank)[0].shape[0 if groups == 1 else 1]


def auto_reset(
    state: SimState,
    scene_idx: jax.Array,
    done: jax.Array,
    bank: Scenario,
    cond_fn: Callable[[jax.Array], jax.Array],
    cfg: SimConfig,
) -> tuple[SimState, jax.Array]:
    """Branch-free reset to a random scene of the bank where `done` [] is set.

    cond_fn(key) -> [A, COND_DIM] conditions for the new episode. Returns (state, scene_idx);
    both are selected leaf by leaf with jnp.where, so it vmaps without running a cond.
    """
    key, k_scene, k_cond, k_state = jax.random.split(state.key, 4)
    n = jax.tree.leaves(bank)[0].shape[0]
    new_idx = jax.random.randint(k_scene, (), 0, n)
    fresh = reset(take_scenario(bank, new_idx), k_state, cond_fn(k_cond), cfg)
    state = state.replace(key=key)
    merged = jax.tree.map(lambda f, s: jnp.where(done, f, s), fresh, state)
    return merged, jnp.where(done, new_idx, scene_idx)


def rollout_rows(
    policy_fn: PolicyFn,
    policy_params,
    state: SimState,
    bank: Scenario,
    scene: jax.Array,
    agent: jax.Array,
    params: SimParams,
    cfg: SimConfig,
    num_steps: int,
) -> tuple[SimState, tuple[jax.Array, StepOut]]:
    """A batched rollout that observes only chosen rows (the policy's agents).

    state and bank are batched [B, ...]; scene, agent [M] name the rows the policy drives
    (observe_agents); everyone else follows their controller. A POLICY / OTHER_POLICY agent that
    is not among the rows keeps going (zero acceleration and steering); rows must not repeat.
    policy_fn(params, obs [M, ...],
    state, key) -> actions [M] (or [M, 2]). Returns the final state and per-step (actions [N, M],
    StepOut [N, B, A]). The policy key is split off the first scene's key each step.
    """
    b = state.t.shape[0]
    shape = (b, cfg.max_agents) if cfg.discrete_actions else (b, cfg.max_agents, 2)
    n_steer = params.steer_grid.shape[0]
    keep_going = (params.accel_grid.shape[0] // 2) * n_steer + n_steer // 2 if cfg.discrete_actions else 0.0

    def body(s: SimState, _):
        keys = jax.vmap(jax.random.split)(s.key)  # [B, 2, ...]
        s = s.replace(key=keys[:, 0])
        obs = observe_agents(s, bank, scene, agent, cfg)
        rows = policy_fn(policy_params, obs, s, keys[0, 1])
        actions = jnp.full(shape, keep_going, rows.dtype).at[scene, agent].set(rows)
        s_next, out = jax.vmap(lambda st, a, sc: step(st, a, sc, params, cfg))(s, actions, bank)
        return s_next, (rows, out)

    return jax.lax.scan(body, state, None, length=num_steps)
