"""Ego-centric observations in the BehaviorBench layout.

Ego (7):        goal x, y in the ego frame * 0.005, signed speed / 100, width / 15, length / 30,
                collision flag, respawn flag (always 0: agents are not respawned).
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
    """Observation of every agent slot; rows of agents that are not alive are zero / masked."""
    alive = state.alive
    xy, yaw = state.xy, state.yaw
    length, width = scenario.size[:, 0], scenario.size[:, 1]

    goal_local = geometry.to_frame(scenario.goal, xy, yaw)
    collided = (state.first_collision_t <= state.t).astype(jnp.float32)
    ego = jnp.stack(
        [
            goal_local[:, 0] * 0.005, goal_local[:, 1] * 0.005, state.speed / 100.0,
            width / 15.0, length / 30.0, collided, jnp.zeros_like(collided),
        ],
        -1,
    )

    # Partners: K nearest alive others within the radius.
    a = xy.shape[0]
    dist = jnp.linalg.norm(xy[None, :, :] - xy[:, None, :], axis=-1)
    visible = alive[None, :] & ~jnp.eye(a, dtype=bool) & (dist < cfg.partner_radius)
    neg, idx = jax.lax.top_k(jnp.where(visible, -dist, -jnp.inf), min(cfg.obs_partners, a))
    if cfg.obs_partners > a:  # fewer slots than partner rows: pad (masked)
        pad = ((0, 0), (0, cfg.obs_partners - a))
        neg, idx = jnp.pad(neg, pad, constant_values=-jnp.inf), jnp.pad(idx, pad)
    p_mask = jnp.isfinite(neg) & alive[:, None]
    rel = geometry.to_frame(xy[idx], xy[:, None, :], yaw[:, None])
    dyaw = yaw[idx] - yaw[:, None]
    partners = jnp.stack(
        [
            rel[..., 0] * 0.02, rel[..., 1] * 0.02, width[idx] / 15.0, length[idx] / 30.0,
            jnp.cos(dyaw), jnp.sin(dyaw), state.speed[idx] / 100.0,
            scenario.obj_type[idx].astype(jnp.float32),
        ],
        -1,
    )
    partners = jnp.where(p_mask[..., None], partners, 0.0)

    # Road: the agent's grid cell's nearest segments.
    cells = geometry.cell_of(xy, scenario.grid_origin, scenario.grid_cell, cfg.grid_size)
    ids = scenario.cell_road[cells]  # [A, k]
    safe = jnp.maximum(ids, 0)
    r_mask = (ids >= 0) & alive[:, None]  # the index holds valid segments only
    feat = scenario.road_feat[safe]  # [A, k, 6]: one contiguous row per segment
    mid = geometry.to_frame(feat[..., :2], xy[:, None, :], yaw[:, None])
    c, s = jnp.cos(yaw)[:, None], jnp.sin(yaw)[:, None]
    road = jnp.stack(
        [
            mid[..., 0] * 0.02, mid[..., 1] * 0.02, feat[..., 2] / 100.0, jnp.full(ids.shape, 0.1),
            feat[..., 3] * c + feat[..., 4] * s, feat[..., 4] * c - feat[..., 3] * s, feat[..., 5],
        ],
        -1,
    )
    road = jnp.where(r_mask[..., None], road, 0.0)

    live = alive[:, None]
    return Obs(
        ego=jnp.where(live, ego, 0.0),
        cond=jnp.where(live, conditions.scale(state.cond), 0.0),
        partners=partners,
        partner_mask=p_mask,
        road=road,
        road_mask=r_mask,
    )
