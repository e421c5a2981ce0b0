"""Per-agent episode outcomes from a final SimState (first event wins)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.sim.types import INF_T, SimState

OUTCOMES = ("goal", "collision", "offroad", "timeout")


def outcomes(final: SimState) -> dict[str, jax.Array]:
    """Masks [A] of each agent's outcome: the earliest of goal / collision / off-road, else timeout.

    A collision and an off-road at the same step count as a collision."""
    g, c, o = final.goal_t, final.first_collision_t, final.first_offroad_t
    first = jnp.minimum(jnp.minimum(g, c), o)
    ended = first < INF_T
    collision = ended & (c == first)
    offroad = ended & (o == first) & ~collision
    goal = ended & (g == first) & ~collision & ~offroad
    return {"goal": goal, "collision": collision, "offroad": offroad, "timeout": ~ended}


def rates(final: SimState, mask: jax.Array) -> dict[str, jax.Array]:
    """Share of the agents in mask [..., A] with each outcome (scalars), over all leading axes."""
    out = outcomes(final)
    n = jnp.maximum(jnp.sum(mask), 1)
    return {k: jnp.sum(v & mask) / n for k, v in out.items()}
