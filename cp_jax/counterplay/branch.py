"""Branching: from each restored root, a factual branch and one retry per style, run to the end.

Branches are laid out [F, M, 1 + R]: F failures, M samples (cfg.samples_per_style), branch 0 the
factual (the failing agent keeps its original condition), branches 1..R the retries (its condition
replaced by each style). With style search on, the 1 + R branches of a sample share one key
(common random numbers: the same draws for every agent's actions); off, every retry keeps the
original condition and gets its own key.

    conds, keys = branch_setup(root_state, picked.agent, key, cfg)      # [F, M, 1+R, ...]
    final, trace = run_branches(net, p, root_state, scenario, picked.agent, conds, keys, params, sim)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.counterplay.selfplay import Trace, drive
from cp_jax.policy import networks
from cp_jax.sim.types import Scenario, SimConfig, SimParams, SimState


def branch_setup(root: SimState, agent: jax.Array, key: jax.Array, cfg: CounterPlayConfig):
    """Conditions [F, M, 1+R, COND_DIM] of the failing agent in each branch and keys [F, M, 1+R, 2]."""
    f, m, r = agent.shape[0], cfg.samples_per_style, cfg.num_retries
    original = root.cond[jnp.arange(f), agent]  # [F, COND_DIM]
    if cfg.condition_search:
        retry = jnp.broadcast_to(jnp.asarray(cfg.style_matrix()), (f, m, r, original.shape[-1]))
    else:
        retry = jnp.broadcast_to(original[:, None, None], (f, m, r, original.shape[-1]))
    conds = jnp.concatenate([jnp.broadcast_to(original[:, None, None], (f, m, 1, original.shape[-1])), retry], 2)
    sample_keys = jax.vmap(lambda k: jax.random.split(k, m))(jax.random.split(key, f))  # [F, M, 2]
    if cfg.condition_search:
        keys = jnp.broadcast_to(sample_keys[:, :, None], (f, m, 1 + r, 2))
    else:
        keys = jax.vmap(jax.vmap(lambda k: jnp.stack([k, *jax.random.split(k, r)])))(sample_keys)
    return conds, keys


def run_branches(
    net: networks.ActorCritic,
    net_params,
    root: SimState,
    scenario: Scenario,
    agent: jax.Array,
    conds: jax.Array,
    keys: jax.Array,
    params: SimParams,
    sim: SimConfig,
    keep_row: bool = True,
) -> tuple[SimState, Trace]:
    """Drive every branch from its root to the episode's end.

    root, scenario [F, ...]; agent [F]; conds [F, *B, COND_DIM] and keys [F, *B, 2] for any branch
    layout *B. Returns final states [F, *B, ...] and traces [F, *B, episode_steps] (with the failing
    agent's observations when keep_row)."""
    branch_shape = conds.shape[1:-1]
    flat_c = conds.reshape(conds.shape[0], -1, conds.shape[-1])
    flat_k = keys.reshape(keys.shape[0], -1, keys.shape[-1])

    def per_failure(s0, sc, row, cs, ks):
        def per_branch(c, k):
            start = s0.replace(cond=s0.cond.at[row].set(c), key=k)
            return drive(net, net_params, start, sc, params, sim, sim.episode_steps, row=row if keep_row else None)

        return jax.vmap(per_branch)(cs, ks)

    final, trace = jax.vmap(per_failure)(root, scenario, agent, flat_c, flat_k)
    unflat = lambda x: x.reshape(x.shape[:1] + branch_shape + x.shape[2:])  # noqa: E731
    return jax.tree.map(unflat, final), jax.tree.map(unflat, trace)
