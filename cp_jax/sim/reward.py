"""The reward-conditioned per-agent reward (Gigaflow / BehaviorBench form).

r = -(a_coll + 0.1 |v|) 1[collision] - a_bnd 1[offroad] + 1[goal]
    + 2.5e-3 dt max(cos th, 0) 1[v > 2.5]                                   velocity along lane
    - a_comfort (1[|a_long| > 3] + 1[|a_lat| > 3] + 1[|jerk_long| > 5 or |jerk_lat| > 5])
    + a_l_align dt (min(cos th, 0) + a_vel_align min(v cos th, 0) + 0.0025 (1 - |th| / (pi/2)))
    - a_l_center dt (1[cos th > 0.5] |x - bias| - 0.05 / exp(|x - bias| - 0.5))
    - 2.5e-5 dt 1[moving] - a_reverse dt 1[v < 0]
th: heading error to the nearest lane; x: lateral offset from its centreline (m, + = right).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.sim.conditions import field


@struct.dataclass
class Kinematics:
    """Per-agent quantities the reward reads ([A] each)."""

    speed: jax.Array  # signed
    accel: jax.Array  # longitudinal, this step
    lat_accel: jax.Array
    jerk_long: jax.Array
    jerk_lat: jax.Array
    heading_err: jax.Array  # to the nearest lane
    lateral: jax.Array  # offset from the nearest lane centre
    on_lane: jax.Array  # bool: a lane was found near the agent


COMFORT_ACCEL, COMFORT_JERK = 3.0, 5.0  # m/s^2, m/s^3


def comfort_violations(accel, lat_accel, jerk_long, jerk_lat) -> jax.Array:
    """The comfort rule, [..., 3] bool: |a_long| > 3, |a_lat| > 3 (m/s^2), |jerk_long| or |jerk_lat| > 5
    (m/s^3). The reward pays alpha_comfort per violation (`comfort_events`); the benchmark's comfort
    sub-score counts the steps with any."""
    return jnp.stack([jnp.abs(accel) > COMFORT_ACCEL, jnp.abs(lat_accel) > COMFORT_ACCEL,
                      (jnp.abs(jerk_long) > COMFORT_JERK) | (jnp.abs(jerk_lat) > COMFORT_JERK)], -1)


def comfort_events(accel, lat_accel, jerk_long, jerk_lat) -> jax.Array:
    """Comfort violations [...] in 0..3 (`comfort_violations` counted)."""
    return jnp.sum(comfort_violations(accel, lat_accel, jerk_long, jerk_lat).astype(jnp.float32), -1)


def reward_terms(cond: jax.Array, kin: Kinematics, collided, offroad, at_goal, dt: float):
    """Each term [A] of the reward as a dict (their sum is the reward)."""
    v = kin.speed
    cos_th = jnp.where(kin.on_lane, jnp.cos(kin.heading_err), 1.0)
    abs_th = jnp.where(kin.on_lane, jnp.abs(kin.heading_err), 0.0)
    x = kin.lateral - field(cond, "alpha_center_bias")
    align = (
        jnp.minimum(cos_th, 0.0)
        + field(cond, "alpha_vel_align") * jnp.minimum(cos_th * v, 0.0)
        + 0.0025 * (1.0 - abs_th / (jnp.pi / 2))
    )
    center = (cos_th > 0.5) * jnp.abs(x) - 0.05 / jnp.exp(jnp.abs(x) - 0.5)
    on_lane = kin.on_lane.astype(jnp.float32)
    return {
        "collision": -(field(cond, "alpha_coll") + 0.1 * jnp.abs(v)) * collided,
        "offroad": -field(cond, "alpha_bnd") * offroad,
        "goal": 1.0 * at_goal,
        "velocity": 2.5e-3 * dt * jnp.maximum(cos_th, 0.0) * (v > 2.5) * on_lane,
        "comfort": -field(cond, "alpha_comfort") * comfort_events(kin.accel, kin.lat_accel, kin.jerk_long,
                                                                  kin.jerk_lat),
        "lane_align": field(cond, "alpha_l_align") * dt * align * on_lane,
        "lane_center": -field(cond, "alpha_l_center") * dt * center * on_lane,
        "time": -2.5e-5 * dt * (jnp.abs(v) > 0.1),
        "reverse": -field(cond, "alpha_reverse") * dt * (v < 0.0),
    }


def reward(cond, kin, collided, offroad, at_goal, dt: float) -> jax.Array:
    """Sum of `reward_terms` [A]."""
    terms = reward_terms(cond, kin, collided, offroad, at_goal, dt)
    return sum(terms.values())


def fixed_reward(collided, offroad, at_goal) -> jax.Array:
    """The non-conditioned PPO baseline's reward: goal +1, collision -0.5, off-road -0.5."""
    return 1.0 * at_goal - 0.5 * collided - 0.5 * offroad
