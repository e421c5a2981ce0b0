"""The student gate (ours, not the paper's): verify the distilled policy, not only the retries.

    gate = make_gate(net, cfg, sim, params, mesh)
    accept, diag, steps = gate(old_params, new_params, bank, key)

Both policies drive the same cfg.gate_envs random scenes of the bank from frame 0 under the deployment
condition with greedy actions (as the benchmark drives), sharing every random number: each
controllable agent in an episode of its own among log-replayed traffic (the benchmark's Expert regime,
one ego per episode, on training scenes). The episodes score goals - collisions - off-road exits of the
policy-driven agents; the round's update is kept only if the new policy's total is at least the old
one's. Every policy agent-step of both runs is charged to the budget.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax import parallel
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.counterplay.selfplay import drive
from cp_jax.policy import networks
from cp_jax.sim import conditions, env, metrics, types
from cp_jax.sim.types import Scenario, SimConfig, SimParams


def make_gate(net: networks.ActorCritic, cfg: CounterPlayConfig, sim: SimConfig, params: SimParams, mesh=None):
    """gate(old_params, new_params, bank, key) -> (accept [] bool, diagnostics, agent-steps [])."""
    parallel.check_divisible(cfg.gate_envs, mesh, "CounterPlayConfig.gate_envs")
    deploy = conditions.style(cfg.deploy_style)

    def score(p, scenes: Scenario, keys: jax.Array):
        """[G] goals - collisions - off-road exits per scene, [G] agent-steps."""

        def one(scenario, k, controller):
            cond = jnp.broadcast_to(deploy, (sim.max_agents, deploy.shape[0]))
            s0 = env.reset(scenario, k, cond, sim, controller)
            final, trace = drive(net, p, s0, scenario, params, sim, sim.episode_steps, greedy=True)
            out = metrics.outcomes(final)
            controlled = s0.controller == types.POLICY
            points = out["goal"].astype(jnp.float32) - out["collision"] - out["offroad"]
            return jnp.sum(points * controlled), trace.counted.sum()

        slots = jnp.arange(sim.max_agents)
        egos = jnp.where(slots[:, None] == slots[None, :], types.POLICY, types.LOG)  # [A egos, A agents]
        per_ego = jax.vmap(jax.vmap(one, in_axes=(None, None, 0)), in_axes=(0, 0, None))(scenes, keys, egos)
        return jax.tree.map(lambda x: x.sum(-1), per_ego)  # [G]

    def gate(old_p, new_p, bank: Scenario, key: jax.Array):
        k_idx, k_env = jax.random.split(key)
        idx = jax.random.randint(k_idx, (cfg.gate_envs,), 0, env.bank_size(bank, cfg.bank_groups))
        scenes = parallel.constrain(env.take_scenes(bank, idx, cfg.bank_groups, "CounterPlayConfig.bank_groups"),
                                    mesh)
        keys = jax.random.split(k_env, cfg.gate_envs)
        old, old_steps = score(old_p, scenes, keys)
        new, new_steps = score(new_p, scenes, keys)
        accept = new.sum() >= old.sum()
        diag = dict(gate_old=old.sum(), gate_new=new.sum(), gate_accepted=accept.astype(jnp.float32))
        return accept, diag, old_steps.sum() + new_steps.sum()

    return gate
