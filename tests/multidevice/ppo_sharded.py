"""Run under 4 forced host devices (tests/test_parallel.py starts it in its own process):
data-parallel PPO on a 4-device mesh vs the single-device run of the same global batch. The policy
is the LSTM variant, so its memory [B, A, ...] is split with the envs too."""

import dataclasses
import json
import sys

import jax
import numpy as np

from cp_jax import parallel
from cp_jax.policy import networks
from cp_jax.rl import ppo
from cp_jax.sim import types
from tests.test_ppo import NET, SIM, _bank, _cfg


def max_diff(a, b) -> float:
    """Largest absolute difference between two pytrees of arrays."""
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


LSTM = dataclasses.replace(NET, lstm=8)


def checksums(params) -> list[float]:
    return [float(np.abs(np.asarray(x)).sum()) for x in jax.tree.leaves(params)]


def run(mesh, updates: int, net_cfg=LSTM):
    bank = _bank()
    cfg = _cfg(num_envs=8, sample_capacity=0.5, compact_groups=4)  # device-local compaction on 4 devices
    net = networks.ActorCritic(net_cfg)
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(3), bank)
    if mesh is not None:
        runner, bank = ppo.shard_runner(runner, mesh), parallel.replicate(bank, mesh)
    update = ppo.make_update(net, cfg, SIM, types.default_params(), mesh=mesh)
    stats = []
    for _ in range(updates):
        runner, s = update(runner, bank)
        stats.append({k: float(v) for k, v in jax.device_get(s).items()})
    return runner, stats


def main():
    assert len(jax.devices()) == 4, jax.devices()
    mesh = parallel.make_mesh()
    one, stats_one = run(None, 3)
    four, stats_four = run(mesh, 3)
    env_sharding = four.env.xy.sharding
    out = dict(
        devices=len(jax.devices()),
        env_shards=len({s.device for s in four.env.xy.addressable_shards}),
        env_spec=str(env_sharding.spec),
        params_replicated=bool(jax.tree.leaves(four.params)[0].sharding.is_fully_replicated),
        max_param_diff=max_diff(one.params, four.params),
        same_env_state=bool(np.allclose(np.asarray(one.env.xy), np.asarray(four.env.xy), atol=1e-4)),
        same_steps=float(one.agent_steps) == float(four.agent_steps),
        max_stat_diff=max(abs(a[k] - b[k]) / (1.0 + abs(a[k]))
                          for a, b in zip(stats_one, stats_four, strict=True) for k in a),
    )
    out["one_device"] = dict(agent_steps=float(one.agent_steps), checksums=checksums(one.params),
                             goal_rate=[st["goal_rate"] for st in stats_one])
    try:
        ppo.make_update(networks.ActorCritic(NET), _cfg(num_envs=6), SIM, types.default_params(), mesh=mesh)
        out["indivisible_error"] = ""
    except ValueError as e:
        out["indivisible_error"] = str(e)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
