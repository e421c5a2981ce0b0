"""Ego-centric observations in the BehaviorBench layout.

Ego (9):        goal x, y in the ego frame * 0.005, signed speed / 100, width / 15, length / 30,
                collision flag, respawn flag (always 0: agents are not respawned), and (not in
                BehaviorBench's 7) the previous step's acceleration / 4 and steering angle: the
                comfort reward penalises jerk, i.e. changes of these, so without them the reward
                is not a function of what the policy sees.
Partners (K, 8): nearest alive others within partner_radius, nearest first: relative x, y * 0.02,
                width / 15, length / 30, relative heading cos, sin, signed speed / 100, type id.
Road (k, 7):    the k segments nearest the agent's grid cell centre: midpoint x, y * 0.02 in the
                ego frame, length / 100, a width constant (0.1), relative heading cos, sin, type id.
Condition (10): the agent's reward condition scaled to [-1, 1].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.sim import conditions, geometry
from cp_jax.sim.types import Obs, Scenario, SimConfig, SimState


def observe(state: SimState, scenario: Scenario, cfg: SimConfig) -> Obs:
    """Observation of every agent slot [A, ...]; rows of agents that are not alive are zero / masked."""
    a = cfg.max_agents
    xy, yaw, alive = state.xy, state.yaw, state.alive
    dist = jnp.linalg.norm(xy[None, :, :] - xy[:, None, :], axis=-1)  # [A, A]
    visible = alive[None, :] & ~jnp.eye(a, dtype=bool) & (dist < cfg.partner_radius)
    p_mask, idx = _nearest(dist, visible, alive, cfg)
    cells = geometry.cell_of(xy, scenario.grid_origin, scenario.grid_cell, cfg.grid_size)
    ids = scenario.cell_road[cells]  # [A, k]
    return _encode(
        xy, yaw, alive, state.speed, scenario.size, scenario.goal, state.first_collision_t <= state.t, state.cond,
        state.accel, state.steer,
        geometry.take(xy, idx), yaw[idx], state.speed[idx], geometry.take(scenario.size, idx),
        scenario.obj_type[idx], p_mask,
        geometry.take(scenario.road_feat, jnp.maximum(ids, 0)), ids >= 0,
    )


def observe_agents(
    state: SimState, scenario: Scenario, scene: jax.Array, agent: jax.Array, cfg: SimConfig
) -> Obs:
    """Observations of chosen rows of a batch of scenes: state and scenario batched [B, ...];
    scene, agent [M] int -> Obs [M, ...].

    Cost scales with M, not B * A: a trainer observes only its controlled agents (the policy's
    batch), however many slots the scenes have. Row m equals observe(scene m)[agent m].
    """
    xy, yaw, alive = geometry.take(state.xy, scene, agent), state.yaw[scene, agent], state.alive[scene, agent]
    others = state.xy[scene]  # [M, A, 2]
    a = others.shape[1]
    dist = jnp.linalg.norm(others - xy[:, None, :], axis=-1)  # [M, A]
    visible = state.alive[scene] & (jnp.arange(a)[None, :] != agent[:, None]) & (dist < cfg.partner_radius)
    p_mask, idx = _nearest(dist, visible, alive, cfg)
    s_idx = scene[:, None]
    cells = geometry.cell_of(xy, scenario.grid_origin[scene], scenario.grid_cell[scene][:, None], cfg.grid_size)
    ids = scenario.cell_road[scene, cells]  # [M, k]
    return _encode(
        xy, yaw, alive, state.speed[scene, agent], geometry.take(scenario.size, scene, agent),
        geometry.take(scenario.goal, scene, agent),
        state.first_collision_t[scene, agent] <= state.t[scene], state.cond[scene, agent],
        state.accel[scene, agent], state.steer[scene, agent],
        geometry.take(state.xy, s_idx, idx), state.yaw[s_idx, idx], state.speed[s_idx, idx],
        geometry.take(scenario.size, s_idx, idx), scenario.obj_type[s_idx, idx], p_mask,
        geometry.take(scenario.road_feat, s_idx, jnp.maximum(ids, 0)), ids >= 0,
    )


def _nearest(dist, visible, alive, cfg: SimConfig):
    """Mask [M, K] and indices [M, K] of the K nearest visible others, nearest first."""
    a = dist.shape[1]
    neg, idx = jax.lax.top_k(jnp.where(visible, -dist, -jnp.inf), min(cfg.obs_partners, a))
    if cfg.obs_partners > a:  # fewer slots than partner rows: pad (masked)
        pad = ((0, 0), (0, cfg.obs_partners - a))
        neg, idx = jnp.pad(neg, pad, constant_values=-jnp.inf), jnp.pad(idx, pad)
    return jnp.isfinite(neg) & alive[:, None], idx


def _encode(xy, yaw, alive, speed, size, goal, collided, cond, accel, steer,
            p_xy, p_yaw, p_speed, p_size, p_type, p_mask, road_feat, road_ok) -> Obs:
    """Ego-frame features and normalisation. Rows [M]; partners [M, K]; road rows [M, k, 6]."""
    goal_local = geometry.to_frame(goal, xy, yaw)
    collided = collided.astype(jnp.float32)
    ego = jnp.stack(
        [
            goal_local[:, 0] * 0.005, goal_local[:, 1] * 0.005, speed / 100.0,
            size[:, 1] / 15.0, size[:, 0] / 30.0, collided, jnp.zeros_like(collided), accel / 4.0, steer,
        ],
        -1,
    )
    rel = geometry.to_frame(p_xy, xy[:, None, :], yaw[:, None])
    dyaw = p_yaw - yaw[:, None]
    partners = jnp.stack(
        [
            rel[..., 0] * 0.02, rel[..., 1] * 0.02, p_size[..., 1] / 15.0, p_size[..., 0] / 30.0,
            jnp.cos(dyaw), jnp.sin(dyaw), p_speed / 100.0, p_type.astype(jnp.float32),
        ],
        -1,
    )
    r_mask = road_ok & alive[:, None]  # the index holds valid segments only
    mid = geometry.to_frame(road_feat[..., :2], xy[:, None, :], yaw[:, None])
    c, s = jnp.cos(yaw)[:, None], jnp.sin(yaw)[:, None]
    road = jnp.stack(
        [
            mid[..., 0] * 0.02, mid[..., 1] * 0.02, road_feat[..., 2] / 100.0, jnp.full(r_mask.shape, 0.1),
            road_feat[..., 3] * c + road_feat[..., 4] * s, road_feat[..., 4] * c - road_feat[..., 3] * s,
            road_feat[..., 5],
        ],
        -1,
    )
    live = alive[:, None]
    return Obs(
        ego=jnp.where(live, ego, 0.0),
        cond=jnp.where(live, conditions.scale(cond), 0.0),
        partners=jnp.where(p_mask[..., None], partners, 0.0),
        partner_mask=p_mask,
        road=jnp.where(r_mask[..., None], road, 0.0),
        road_mask=r_mask,
    )
