"""Run under 4 forced host devices (tests/test_parallel.py starts it in its own process):
data-parallel PPO on a 4-device mesh vs the single-device run of the same global batch. The policy
is the LSTM variant, so its memory [B, A, ...] is split with the envs too. Then the same with the
scenario bank split in 4 groups (PPOConfig.bank_groups), one per device."""

import dataclasses
import json
import re
import sys

import jax
import numpy as np

from cp_jax import parallel
from cp_jax.policy import networks
from cp_jax.rl import ppo
from cp_jax.scenarios.bank import make_bank
from cp_jax.sim import env, types
from tests.test_ppo import NET, SIM, _bank, _cfg
from tests.worlds import straight_road


def max_diff(a, b) -> float:
    """Largest absolute difference between two pytrees of arrays."""
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


LSTM = dataclasses.replace(NET, lstm=8)


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


GROUPS = 4


def group_scenes(groups: list[int]):
    """The grouped test bank's groups [len(groups), 1, ...]: group g is one car starting at x = 10 + 20 g
    (so every env's start shows which group its scene came from)."""
    scenes = [straight_road([(10.0 + 20.0 * g, -2.0, 0.0, 5.0)], goals=[(30.0 + 20.0 * g, -2.0)], name=f"g{g}")
              for g in groups]
    return env.group_bank(make_bank(scenes, SIM), len(groups))


def run_groups(mesh, updates: int):
    """PPO with bank_groups=4 (8 envs, 2 per group); with a mesh the bank is placed group by group,
    each process building only the groups of its own devices."""
    cfg = _cfg(num_envs=8, sample_capacity=0.5, compact_groups=GROUPS, bank_groups=GROUPS)
    net = networks.ActorCritic(NET)
    if mesh is None:
        bank = group_scenes(list(range(GROUPS)))
    else:
        bank = parallel.shard_groups(group_scenes(parallel.local_groups(GROUPS, mesh)), mesh, GROUPS)
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(5), bank, mesh=mesh)
    start_x = np.asarray(parallel.local(ppo.take_scenes(bank, runner.scene_idx, cfg).log_xy[:, 0, 0, 0])
                         if mesh is None else [])
    update = ppo.make_update(net, cfg, SIM, types.default_params(), mesh=mesh)
    hlo = ""
    if mesh is not None:  # the compiled program is read, then run (not compiled a second time)
        update = update.lower(runner, bank).compile()
        hlo = update.as_text()
    for _ in range(updates):
        runner, _ = update(runner, bank)
    return runner, bank, start_x, hlo


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
    try:
        ppo.make_update(networks.ActorCritic(NET), _cfg(num_envs=6), SIM, types.default_params(), mesh=mesh)
        out["indivisible_error"] = ""
    except ValueError as e:
        out["indivisible_error"] = str(e)
    one_g, _, start_x, _ = run_groups(None, 3)
    four_g, bank_g, _, hlo = run_groups(mesh, 3)
    out["groups"] = dict(
        start_x=start_x.tolist(),
        bank_shard_shapes=sorted({tuple(s.data.shape[:2]) for s in jax.tree.leaves(bank_g)[0].addressable_shards}),
        bank_spec=str(jax.tree.leaves(bank_g)[0].sharding.spec),
        max_param_diff=max_diff(one_g.params, four_g.params),
        same_env_state=bool(np.allclose(np.asarray(one_g.env.xy), np.asarray(four_g.env.xy), atol=1e-4)),
        # The update's all-gathers and the elements of each f32 one (observe's top-k of partners gathers
        # [B, A, A] distances; a gathered bank would be far larger, or not f32 alone).
        all_gathers=hlo.count("all-gather("),
        all_gather_sizes=[int(np.prod([int(d) for d in m.split(",") if d]))
                          for m in re.findall(r"= f32\[([\d,]*)\][^ ]* all-gather\(", hlo)],
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
