"""Verification: a retry passes when the failing agent reaches its goal cleanly and no other agent
has a new or earlier collision / off-road than in the factual branch run with the same key.

    ok = passes(factual_final, retry_final, agent, check_others=True)      # [...] bool
    found, m, r = choose(ok, retry_final.goal_t[..., agent], cfg.style_rank())
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.sim.types import INF_T, SimState


def own_success(final: SimState, agent: jax.Array) -> jax.Array:
    """[...] bool: agent [...] reached its goal with no collision or off-road of its own.

    final is batched [..., A, ...] with the same leading dims as agent."""
    take = lambda x: jnp.take_along_axis(x, agent[..., None], axis=-1)[..., 0]  # noqa: E731
    return ((take(final.goal_t) < INF_T) & (take(final.first_collision_t) == INF_T)
            & (take(final.first_offroad_t) == INF_T))


def others_safe(factual: SimState, retry: SimState, agent: jax.Array) -> jax.Array:
    """[...] bool: for every agent j != agent, its first collision and first off-road in the retry
    are absent or no earlier than in the factual branch (an event absent from the factual branch
    is new; INF_T compares as 'never')."""
    a = retry.goal_t.shape[-1]
    other = jnp.arange(a) != agent[..., None]
    ok = (retry.first_collision_t >= factual.first_collision_t) & (retry.first_offroad_t >= factual.first_offroad_t)
    return jnp.all(ok | ~other, axis=-1)


def passes(factual: SimState, retry: SimState, agent: jax.Array, check_others: bool = True) -> jax.Array:
    """[...] bool: the retry completes the agent's task (and, with check_others, harms no one)."""
    ok = own_success(retry, agent)
    return ok & others_safe(factual, retry, agent) if check_others else ok


def choose(ok: jax.Array, goal_t: jax.Array, rank: np.ndarray) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Best passing retry per failure: the style closest to the deployment condition (lowest rank),
    ties broken by the earliest goal. ok, goal_t [F, M, R]; rank [R].
    Returns (found [F] bool, sample [F] int32, retry [F] int32 in 0..R-1)."""
    f, m, r = ok.shape
    big = jnp.int32(np.iinfo(np.int32).max)
    score = jnp.asarray(rank, jnp.int32)[None, None, :] * (INF_T + 1) + jnp.minimum(goal_t, INF_T)
    score = jnp.where(ok, score, big).reshape(f, m * r)
    best = jnp.argmin(score, axis=1)
    return jnp.any(ok.reshape(f, -1), axis=1), (best // r).astype(jnp.int32), (best % r).astype(jnp.int32)
