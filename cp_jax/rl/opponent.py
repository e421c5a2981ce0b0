"""PPO-Opponent (baseline): self-play PPO where a share of the agents (PPOConfig.opponent_frac) is
driven by a past snapshot of the policy, drawn from a pool, and excluded from the loss.

The pool is part of the state (a checkpoint holds it): K parameter sets stacked [K, ...], filled
with the starting policy, and the learner's parameters written into the next slot every
`pool_every` updates (oldest replaced). Each update draws one snapshot of those added so far.

    state = init(runner, pool_size=4)
    step = make_step(net, cfg, sim, params, pool_every=5)
    state, stats = step(state, bank, shape_w)    # shape_w: rl/shaping.py, optional
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.policy import networks
from cp_jax.rl import ppo
from cp_jax.sim.types import Scenario, SimConfig, SimParams


@struct.dataclass
class OpponentState:
    runner: ppo.Runner
    pool: Any  # parameter pytree, every leaf stacked [K, ...]
    added: jax.Array  # [] int32 snapshots added (the starting policy counts as one)

    @property
    def agent_steps(self) -> jax.Array:
        return self.runner.agent_steps

    @property
    def params(self):
        return self.runner.params


def init(runner: ppo.Runner, pool_size: int) -> OpponentState:
    if pool_size < 1:
        raise ValueError(f"opponent pool_size must be >= 1, got {pool_size}")
    pool = jax.tree.map(lambda x: jnp.stack([x] * pool_size), runner.params)
    return OpponentState(runner=runner, pool=pool, added=jnp.ones((), jnp.int32))


def make_step(net: networks.ActorCritic, cfg: ppo.PPOConfig, sim: SimConfig, params: SimParams, pool_every: int,
              mesh=None):
    """step(state, bank, shape_w=None) -> (state, stats): one PPO update against a pool snapshot, then maybe a new
    snapshot (data-parallel over mesh's devices, see ppo.make_update)."""
    if cfg.opponent_frac <= 0.0:
        raise ValueError("PPO-Opponent needs PPOConfig.opponent_frac > 0")
    if pool_every < 1:
        raise ValueError(f"opponent pool_every must be >= 1, got {pool_every}")
    update = ppo.make_update(net, cfg, sim, params, mesh=mesh)

    @jax.jit
    def draw(state: OpponentState):
        k = jax.tree.leaves(state.pool)[0].shape[0]
        key = jax.random.fold_in(state.runner.key, state.runner.update)
        i = jax.random.randint(key, (), 0, jnp.minimum(state.added, k))
        return jax.tree.map(lambda x: x[i], state.pool)

    @jax.jit
    def snapshot(state: OpponentState, runner: ppo.Runner) -> OpponentState:
        k = jax.tree.leaves(state.pool)[0].shape[0]
        add = runner.update % pool_every == 0
        slot = state.added % k
        pool = jax.tree.map(lambda p, x: jnp.where(add, p.at[slot].set(x), p), state.pool, runner.params)
        return OpponentState(runner=runner, pool=pool, added=state.added + add.astype(jnp.int32))

    def step(state: OpponentState, bank: Scenario, shape_w=None):
        runner, stats = update(state.runner, bank, shape_w, draw(state))
        return snapshot(state, runner), stats

    return step
