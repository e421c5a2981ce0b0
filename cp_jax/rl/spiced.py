"""Human-regularised PPO (baseline, SPICED-style): PPO from the anchor plus bc_coef x the negative
log-likelihood of logged actions.

The logs hold poses, not actions: the actions are recovered by closed-loop tracking in the
policy's own dynamics (cp_jax.rl.bc.make_dataset, noise-free pass), observed under the normal
style. On procedural scenes the "human" logs are IDM-driven (smooth, rule-following); on a real
scene cache they are WOMD drivers. Labelling simulates trackers, not self-play: it is not charged
to the budget.

    data = human_data(bank, params, sim, key, stride=4)    # device-resident Dataset
    step = make_step(net, ppo_cfg, sim, params, data, batch=256)
    runner, stats = step(runner, bank, shape_w)    # shape_w: rl/shaping.py, optional
"""

from __future__ import annotations

import jax
from absl import logging

from cp_jax.policy import networks
from cp_jax.rl import bc, ppo
from cp_jax.sim.types import Scenario, SimConfig, SimParams


def human_data(bank: Scenario, params: SimParams, sim: SimConfig, key: jax.Array, stride: int = 1) -> bc.Dataset:
    """Tracked log actions and observations of every controllable agent of the bank (every
    stride-th sample), on the device."""
    data, _ = bc.make_dataset(bank, params, sim, bc.BCConfig(noisy_passes=0), key, noisy=False)
    keep = slice(None, None, stride)
    return jax.device_put(jax.tree.map(lambda x: x[keep], data))


def make_step(net: networks.ActorCritic, cfg: ppo.PPOConfig, sim: SimConfig, params: SimParams, data: bc.Dataset,
              batch: int, mesh=None):
    """step(runner, bank, shape_w=None) -> (runner, stats): one PPO update with a random batch of logged actions
    (data-parallel over mesh's devices, see ppo.make_update)."""
    if cfg.bc_coef <= 0.0:
        raise ValueError("human-regularised PPO needs PPOConfig.bc_coef > 0")
    n = data.action.shape[0]
    if n == 0:
        raise ValueError("human-regularised PPO: no logged samples (no controllable agent tracked)")
    update = ppo.make_update(net, cfg, sim, params, mesh=mesh)

    @jax.jit
    def draw(runner: ppo.Runner):
        idx = jax.random.randint(jax.random.fold_in(runner.key, runner.update), (batch,), 0, n)
        return jax.tree.map(lambda x: x[idx], data.obs), data.action[idx], data.weight[idx]

    def step(runner: ppo.Runner, bank: Scenario, shape_w=None):
        return update(runner, bank, shape_w, human=draw(runner))

    return step


def check_config(human) -> None:
    """Validate an experiment's `human` section (batch, stride); raises ValueError naming the fields."""
    if human is None or human.batch < 1 or human.stride < 1:
        raise ValueError("config.human.batch and config.human.stride must be >= 1")


def step_from_config(net: networks.ActorCritic, cfg: ppo.PPOConfig, sim: SimConfig, params: SimParams,
                     bank: Scenario, human, seed: int, mesh=None):
    """`make_step` on the bank's tracked log actions (every human.stride-th, human.batch per update)."""
    data = human_data(bank, params, sim, jax.random.PRNGKey(seed), human.stride)
    logging.info("human regularisation: %d logged samples", int(data.action.shape[0]))
    return make_step(net, cfg, sim, params, data, human.batch, mesh=mesh)
