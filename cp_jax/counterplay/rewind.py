"""PPO-Rewind (baseline): self-play PPO whose episodes restart from backtracked states of failed
episodes, with no change of style.

Each step: record cfg.num_envs self-play episodes with the current policy, pick up to num_envs
(PPO's) failures, rewind each to its root (cfg.root_rule / cfg.window, as CounterPlay), put those
world states in PPO's envs (conditions as recorded), then one PPO update. Envs without a failure
keep their running episode. The record is charged to the budget like PPO's own rollout.

    step = make_step(net, cp_cfg, ppo_cfg, sim, params)    # jitted parts inside
    runner, stats = step(runner, bank, shape_w)    # shape_w: rl/shaping.py, optional
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.counterplay.backtrack import choose_root, make_replay, restore
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.counterplay.record import find_failures, pick_failures, record
from cp_jax.policy import networks
from cp_jax.rl import ppo
from cp_jax.sim.types import Scenario, SimConfig, SimParams


def make_rewind(net: networks.ActorCritic, cfg: CounterPlayConfig, ppo_cfg: ppo.PPOConfig, sim: SimConfig,
                params: SimParams):
    """The jitted rewind(runner, bank) -> (runner, envs rewound): record, pick failures, put their
    roots in PPO's envs (the record's agent-steps added to runner.agent_steps)."""
    b = ppo_cfg.num_envs
    if b > cfg.num_envs * sim.max_agents:
        raise ValueError(f"PPOConfig.num_envs ({b}) exceeds the tasks a record holds "
                         f"(counterplay.num_envs x max_agents = {cfg.num_envs * sim.max_agents})")

    replay = make_replay(net, cfg, sim, params)

    @jax.jit
    def rewind(runner: ppo.Runner, bank: Scenario):
        key, k_rec, k_pick = jax.random.split(runner.key, 3)
        rec = record(net, runner.params, bank, k_rec, cfg, params, sim)
        picked = pick_failures(find_failures(rec, cfg, sim), k_pick, b)
        root = choose_root(rec, picked, cfg)
        roots, _ = restore(rec, picked, root, cfg.snapshot_every, replay(runner.params))
        use = picked.valid
        pick = lambda r, s: jnp.where(use.reshape(use.shape + (1,) * (s.ndim - 1)), r, s)  # noqa: E731
        env = jax.tree.map(pick, roots, runner.env)
        return runner.replace(
            env=env, scene_idx=jnp.where(use, rec.scene_idx[picked.env], runner.scene_idx),
            ep_return=jnp.where(use[:, None], 0.0, runner.ep_return), key=key,
            agent_steps=runner.agent_steps + rec.agent_steps,
        ), use.sum()

    return rewind


def make_step(net: networks.ActorCritic, cfg: CounterPlayConfig, ppo_cfg: ppo.PPOConfig, sim: SimConfig,
              params: SimParams, mesh=None):
    """step(runner, bank, shape_w=None) -> (runner, stats): rewind PPO's envs to failure roots, then one update
    (data-parallel over mesh's devices, see ppo.make_update)."""
    rewind = make_rewind(net, cfg, ppo_cfg, sim, params)
    update = ppo.make_update(net, ppo_cfg, sim, params, mesh=mesh)

    def step(runner: ppo.Runner, bank: Scenario, shape_w=None):
        runner, rewound = rewind(runner, bank)
        runner, stats = update(runner, bank, shape_w)
        return runner, dict(stats, rewound=rewound)

    return step
