"""Training-only reward shaping, added to the policy agents' reward inside PPO's rollout.

The benchmark and every evaluation see the paper's reward only. The weights are arrays (a pytree
passed to `ppo.make_update`'s update like the simulator's SimParams), so changing one never
recompiles and they can be vmapped over:

    extra = progress_per_m x (route distance to the goal before the step - after it)
          - collision_gain x (alpha_coll / 3 if gain_by_weight else 1) x alpha_coll x 1[collision]
          + (1 - comfort_scale) x alpha_comfort x comfort violations of the step
          - ttc_gain x (alpha_coll / 3 if gain_by_weight else 1) x dt x max(0, 1 - ttc / ttc_horizon)

Progress is measured along the agent's lane route (Scenario.route_xy) to its goal's projection on
it: going round a roundabout pays, and driving on past the goal costs what it paid. The collision
gain makes the condition's own collision weight matter beside the goal and the progress; "by
weight" scales it with alpha_coll / 3, so the conditions that weigh collisions (normal, cautious:
3.0) pay (1 + gain) alpha_coll while one that tolerates them (aggressive: 0.2) pays barely more than
the paper's weight. comfort_scale < 1 refunds part of the comfort term, which the cautious style
otherwise learns to avoid by not braking (docs/decisions.md).

ttc is the agent's time to collision with the nearest alive object ahead in its path after the step
(`time_to_collision`): a dense cost of closing in on a slower car, which scales with speed as a
kinematic quantity where the collision term is paid only once the cars touch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.sim import conditions, controllers, geometry
from cp_jax.sim import reward as reward_lib
from cp_jax.sim.types import Scenario, SimConfig, SimState

ALPHA_COLL_MAX = float(conditions.field(conditions.COND_HIGH, "alpha_coll"))  # DESIGN's range U(0, 3)
FIELDS = ("progress_per_m", "collision_gain", "gain_by_weight", "comfort_scale", "ttc_gain", "ttc_horizon")
PATH_MARGIN = 0.3  # m either side of the two widths: an object this close laterally is in the agent's path


@struct.dataclass
class Shaping:
    """Shaping weights, float32 [] each (module docstring). `none()`: the paper's reward."""

    progress_per_m: jax.Array
    collision_gain: jax.Array
    gain_by_weight: jax.Array  # 1.0: the gain scales with alpha_coll / 3; 0.0: it does not
    comfort_scale: jax.Array
    ttc_gain: jax.Array  # per second of a time to collision below ttc_horizon
    ttc_horizon: jax.Array  # s


def make(progress_per_m: float = 0.0, collision_gain: float = 0.0, gain_by_weight: bool = False,
         comfort_scale: float = 1.0, ttc_gain: float = 0.0, ttc_horizon: float = 3.0) -> Shaping:
    """Shaping from plain numbers; raises ValueError naming a negative weight (or a horizon <= 0)."""
    values = dict(progress_per_m=progress_per_m, collision_gain=collision_gain, gain_by_weight=float(gain_by_weight),
                  comfort_scale=comfort_scale, ttc_gain=ttc_gain, ttc_horizon=ttc_horizon)
    for name, value in values.items():
        if not value >= 0.0:
            raise ValueError(f"shaping.{name} must be >= 0, got {value}")
    if not ttc_horizon > 0.0:
        raise ValueError(f"shaping.ttc_horizon must be > 0 (seconds), got {ttc_horizon}")
    return Shaping(**{k: jnp.asarray(v, jnp.float32) for k, v in values.items()})


def none() -> Shaping:
    return make()


def from_config(section, conditioned: bool = True) -> Shaping:
    """Shaping from a config's `shaping` section (missing fields: none). The collision gain, the comfort
    scale and the ttc cost act on the condition's weights, so the non-conditioned baseline (fixed reward)
    gets none of them."""
    values = dict(section.to_dict() if hasattr(section, "to_dict") else section)
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"config.shaping: unknown field(s) {sorted(unknown)}; known: {list(FIELDS)}")
    if not conditioned:
        values.update(collision_gain=0.0, comfort_scale=1.0, ttc_gain=0.0)
    return make(**values)


def route_to_goal(state: SimState, scenes: Scenario, sim: SimConfig, goal_arc: jax.Array) -> jax.Array:
    """[B, A] distance (m) along every agent's lane route from its position to goal_arc [B, A], its goal's
    arc length on the route (`goal_arc`), either side of it (0 without a route)."""
    arc = jax.vmap(lambda sc, xy: controllers.route_arc(sc, xy, sim))(scenes, state.xy)
    return jnp.abs(arc - goal_arc)


def goal_arc(scenes: Scenario, sim: SimConfig) -> jax.Array:
    """[B, A] arc length (m) of every agent's goal projected on its lane route (0 without a route)."""
    return jax.vmap(lambda sc: controllers.route_arc(sc, sc.goal, sim))(scenes)


def time_to_collision(state: SimState, scenes: Scenario) -> jax.Array:
    """[B, A] seconds until each agent reaches the nearest alive object ahead in its path at the current
    speeds (inf when none is ahead or it is not closing in). Ahead in the path: the object's centre is in
    front in the agent's frame and within half the two widths + PATH_MARGIN of its heading line; the gap
    is that distance less half the two lengths; the closing speed is the agent's speed less the object's
    along the agent's heading."""

    def one(xy, yaw, speed, alive, size):  # one scene: [A, 2], [A], [A], [A], [A, 2]
        rel = jax.vmap(lambda p, y: geometry.to_frame(xy, p, y))(xy, yaw)  # [A, A, 2]: j in i's frame
        length, width = size[:, 0], size[:, 1]
        in_path = ((rel[..., 0] > 0) & (jnp.abs(rel[..., 1]) < 0.5 * (width[:, None] + width[None, :]) + PATH_MARGIN)
                   & alive[:, None] & alive[None, :] & ~jnp.eye(xy.shape[0], dtype=bool))
        gap = jnp.maximum(rel[..., 0] - 0.5 * (length[:, None] + length[None, :]), 0.0)
        closing = speed[:, None] - speed[None, :] * jnp.cos(yaw[None, :] - yaw[:, None])
        ttc = jnp.where(in_path & (closing > 1e-3), gap / jnp.maximum(closing, 1e-3), jnp.inf)
        return jnp.min(ttc, axis=1)

    return jax.vmap(one)(state.xy, state.yaw, state.speed, state.alive, scenes.size)


def add(rew: jax.Array, w: Shaping, state: SimState, nxt: SimState, collided: jax.Array, scenes: Scenario,
        sim: SimConfig, goal: jax.Array) -> jax.Array:
    """rew [B, A] plus the shaping of one step from state to nxt [B, ...] (collided [B, A] by that step;
    goal [B, A] = goal_arc(scenes, sim)), the terms added one after the other."""
    progress = route_to_goal(state, scenes, sim, goal) - route_to_goal(nxt, scenes, sim, goal)
    rew = rew + w.progress_per_m * progress
    alpha = conditions.field(state.cond, "alpha_coll")
    rew = rew - w.collision_gain * jnp.where(w.gain_by_weight > 0, alpha / ALPHA_COLL_MAX, 1.0) * alpha * collided
    events = reward_lib.comfort_events(nxt.accel, nxt.lat_accel, (nxt.accel - state.accel) / sim.dt,
                                       (nxt.lat_accel - state.lat_accel) / sim.dt)
    rew = rew + (1.0 - w.comfort_scale) * conditions.field(state.cond, "alpha_comfort") * events
    by_weight = jnp.where(w.gain_by_weight > 0, alpha / ALPHA_COLL_MAX, 1.0)

    def ttc_cost():  # [B, A]; the pairwise search runs only when the cost is on
        close = jnp.maximum(1.0 - time_to_collision(nxt, scenes) / w.ttc_horizon, 0.0)
        return w.ttc_gain * by_weight * sim.dt * close

    return rew - jax.lax.cond(w.ttc_gain > 0, ttc_cost, lambda: jnp.zeros_like(rew))
