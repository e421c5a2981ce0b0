"""Backtracking: choose the root (the stored step to branch from) for each picked failure.

    root = choose_root(rec, picked, cfg)          # [F] int32 step index into rec.states
    state, scenario = restore(rec, bank, picked, root)   # the world at each root [F, ...]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.counterplay.record import Picked, Recording
from cp_jax.sim import env
from cp_jax.sim.types import Scenario, SimState


def choose_root(rec: Recording, picked: Picked, cfg: CounterPlayConfig) -> jax.Array:
    """[F] int32 root step per failure.

    value: argmax of the failing agent's V over the window [t_fail - H, t_fail - 1] (clipped at
    0; steps where it was alive); fixed: t_fail - H (clipped at 0); none: 0 (the episode start)."""
    t = rec.value.shape[1]
    lo = jnp.maximum(picked.t_fail - cfg.window, 0)
    if cfg.root_rule == "none":
        return jnp.zeros_like(picked.t_fail)
    if cfg.root_rule == "fixed":
        return lo
    v = rec.value[picked.env, :, picked.agent]  # [F, T]
    alive = rec.states.alive[picked.env, :, picked.agent]  # [F, T]
    steps = jnp.arange(t)[None, :]
    window = (steps >= lo[:, None]) & (steps <= picked.t_fail[:, None] - 1) & alive
    root = jnp.argmax(jnp.where(window, v, -jnp.inf), axis=1)
    return jnp.where(jnp.any(window, axis=1), root, lo).astype(jnp.int32)


def restore(rec: Recording, bank: Scenario, picked: Picked, root: jax.Array) -> tuple[SimState, Scenario]:
    """The recorded world state at each root and its scene: (SimState [F, ...], Scenario [F, ...])."""
    state = jax.tree.map(lambda x: x[picked.env, root], rec.states)
    scenario = jax.vmap(env.take_scenario, in_axes=(None, 0))(bank, rec.scene_idx[picked.env])
    return state, scenario
