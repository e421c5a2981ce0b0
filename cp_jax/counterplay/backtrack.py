"""Backtracking: choose the root (the stored step to branch from) for each picked failure.

    root = choose_root(rec, picked, cfg)          # [F] int32 step of the episode
    state, scenario = restore(rec, picked, root, cfg.snapshot_every, replay(net_params))  # [F, ...]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.counterplay.record import Picked, Recording
from cp_jax.counterplay.selfplay import drive
from cp_jax.policy import networks
from cp_jax.sim.types import Scenario, SimConfig, SimParams, SimState


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
    alive = rec.alive[picked.env, :, picked.agent]  # [F, T]
    steps = jnp.arange(t)[None, :]
    window = (steps >= lo[:, None]) & (steps <= picked.t_fail[:, None] - 1) & alive
    root = jnp.argmax(jnp.where(window, v, -jnp.inf), axis=1)
    return jnp.where(jnp.any(window, axis=1), root, lo).astype(jnp.int32)


def restore(rec: Recording, picked: Picked, root: jax.Array, every: int = 1,
            replay=None) -> tuple[SimState, Scenario]:
    """The recorded world state at each root and its scene: (SimState [F, ...], Scenario [F, ...]).

    every: the recording's snapshot_every k. For k > 1 the snapshot before the root (step k floor(root / k))
    is advanced to the root by replay(state [F, ...], scenario [F, ...], root [F]) -> state [F, ...]
    (the recorded policy driven again from the snapshot's key: `selfplay.drive` with stop_t)."""
    scenario = jax.tree.map(lambda x: x[picked.env], rec.scenes)
    state = jax.tree.map(lambda x: x[picked.env, root // every], rec.states)
    if every > 1:
        state = replay(state, scenario, root)
    return state, scenario


def make_replay(net: networks.ActorCritic, cfg: CounterPlayConfig, sim: SimConfig, params: SimParams):
    """replay(net_params) -> fn(state [F, ...], scenario [F, ...], root [F]) -> state [F, ...]: each
    snapshot driven on to its root by the recording's policy (the same parameters, sampled actions from
    the snapshot's own key, so the recorded steps are reproduced), at most
    cfg.snapshot_every - 1 steps."""

    def replay(net_params):
        def one(state, scenario, root):
            return drive(net, net_params, state, scenario, params, sim, cfg.snapshot_every - 1, stop_t=root)[0]

        return jax.vmap(one)

    return replay
