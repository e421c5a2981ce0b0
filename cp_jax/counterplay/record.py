"""Record self-play episodes with per-step snapshots and critic values; find and pick failures.

    rec = record(net, net_params, bank, key, cfg, params, sim)       # B episodes, every step kept
    fails = find_failures(rec, cfg, sim)                             # per-agent failure kinds [B, A]
    picked = pick_failures(fails, key, cfg.max_failures)             # F (env, agent) pairs to repair
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.counterplay.config import FAILURE_KINDS, CounterPlayConfig
from cp_jax.counterplay.selfplay import drive
from cp_jax.policy import networks
from cp_jax.sim import conditions, env, types
from cp_jax.sim.types import INF_T, Scenario, SimConfig, SimParams, SimState


@struct.dataclass
class Recording:
    """B self-play episodes, every step kept."""

    scene_idx: jax.Array  # [B] int32 scene of the bank (of the env's group with cfg.bank_groups > 1)
    scenes: Scenario  # [B, ...] the episodes' scenes (later stages read these, not the bank)
    # [B, ceil(T / k), ...] the state before steps 0, k, 2k, ... (T = sim.episode_steps, k =
    # cfg.snapshot_every; k = 1: every step)
    states: SimState
    alive: jax.Array  # [B, T, A] bool: alive before each step
    value: jax.Array  # [B, T, A] V(o_t, c) of every agent under its own condition
    final: SimState  # [B, ...] after the last step
    controlled: jax.Array  # [B, A] bool: POLICY-driven at the start (the tasks)
    agent_steps: jax.Array  # [] float: POLICY agent-steps simulated


@struct.dataclass
class Failures:
    """Per-task outcome of a recording [B, A]."""

    kind: jax.Array  # int32: -1 success / not a task, else the index into FAILURE_KINDS
    t_fail: jax.Array  # int32: step of the failing event (collision / off-road), episode_steps for a timeout
    target: jax.Array  # bool: a failure of a kind the config targets


@struct.dataclass
class Picked:
    """F failures chosen for repair (slots beyond the failures found are masked)."""

    env: jax.Array  # [F] int32 index into the recording's B
    agent: jax.Array  # [F] int32
    kind: jax.Array  # [F] int32
    t_fail: jax.Array  # [F] int32
    valid: jax.Array  # [F] bool


def record(
    net: networks.ActorCritic,
    net_params,
    bank: Scenario,
    key: jax.Array,
    cfg: CounterPlayConfig,
    params: SimParams,
    sim: SimConfig,
) -> Recording:
    """cfg.num_envs episodes from frame 0 on random scenes of the bank, conditions sampled per agent,
    actions sampled. bank: [S, ...], or [G, S / G, ...] for cfg.bank_groups = G > 1 (`env.group_bank`)."""
    k_idx, k_cond, k_env = jax.random.split(key, 3)
    idx = jax.random.randint(k_idx, (cfg.num_envs,), 0, env.bank_size(bank, cfg.bank_groups))
    scenes = env.take_scenes(bank, idx, cfg.bank_groups, "CounterPlayConfig.bank_groups")
    cond = conditions.sample(k_cond, (cfg.num_envs, sim.max_agents))

    def one(scenario, k, c):
        s0 = env.reset(scenario, k, c, sim)
        final, trace = drive(net, net_params, s0, scenario, params, sim, sim.episode_steps, keep_states=True,
                             keep_values=True, keep_every=cfg.snapshot_every, keep_alive=True)
        return trace.state, trace.alive, trace.value, final, s0.controller == types.POLICY, trace.counted.sum()

    states, alive, value, final, controlled, steps = jax.vmap(one)(scenes, jax.random.split(k_env, cfg.num_envs), cond)
    return Recording(scene_idx=idx, scenes=scenes, states=states, alive=alive, value=value, final=final,
                     controlled=controlled, agent_steps=steps.sum())


def find_failures(rec: Recording, cfg: CounterPlayConfig, sim: SimConfig) -> Failures:
    """A task (a controlled agent) fails unless it reached its goal without a collision or off-road;
    its kind is its first event (collision wins a tie), else timeout."""
    f = rec.final
    event_t = jnp.minimum(f.first_collision_t, f.first_offroad_t)
    clean_goal = (f.goal_t < INF_T) & (event_t == INF_T)
    failed = rec.controlled & ~clean_goal
    kind = jnp.where(event_t == INF_T, FAILURE_KINDS.index("timeout"),
                     jnp.where(f.first_collision_t <= f.first_offroad_t, FAILURE_KINDS.index("collision"),
                               FAILURE_KINDS.index("offroad")))
    kind = jnp.where(failed, kind, -1).astype(jnp.int32)
    t_fail = jnp.where(event_t == INF_T, sim.episode_steps, event_t).astype(jnp.int32)
    targeted = jnp.zeros_like(failed)
    for name in cfg.failure_kinds:
        targeted = targeted | (kind == FAILURE_KINDS.index(name))
    # An event at the first step leaves no decision to go back to.
    return Failures(kind=kind, t_fail=t_fail, target=targeted & (t_fail >= 1))


def pick_failures(fails: Failures, key: jax.Array, num: int) -> Picked:
    """num targeted failures drawn uniformly without replacement (valid = False past those found)."""
    b, a = fails.kind.shape
    priority = jnp.where(fails.target.reshape(-1), jax.random.uniform(key, (b * a,)), -1.0)
    top = jnp.argsort(-priority)[:num]
    env_i, agent = top // a, top % a
    return Picked(env=env_i.astype(jnp.int32), agent=agent.astype(jnp.int32), kind=fails.kind[env_i, agent],
                  t_fail=fails.t_fail[env_i, agent], valid=priority[top] >= 0.0)
