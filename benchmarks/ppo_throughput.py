"""PPO end-to-end throughput and where the time goes, on procedural scenes.

    python benchmarks/ppo_throughput.py --envs=16,32,64 [--updates=5 --agents=12 --net=small]

For each number of parallel envs (scenes) B: one PPO update = rollout (T steps of observe + policy
forward + step for B x max_agents slots) + learning (minibatch epochs over the compacted samples).
Timed separately, after compilation, median of --updates calls:

  sim       the same rollout with random actions (observe + step only)
  forward   rollout with the network minus sim
  learn     the whole update minus the rollout with the network

Prints controlled agent-steps/s (alive policy agents, what the trainer counts), slot-steps/s
(B x A x T), compile time and peak RSS. --json prints one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import jax
import jax.numpy as jnp
from common import procedural_bank, timed  # benchmarks/common.py (scripts run as python benchmarks/NAME.py)

from cp_jax.policy import networks
from cp_jax.rl import ppo, shaping
from cp_jax.sim import env, types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default="16,32,64", help="comma-separated numbers of parallel scenes")
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--scenes", type=int, default=28)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--max_agents", type=int, default=16)
    ap.add_argument("--obs_road", type=int, default=64)
    ap.add_argument("--rollout_steps", type=int, default=45)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--capacity", type=float, default=0.5)
    ap.add_argument("--net", default="small", choices=sorted(networks.PRESETS))
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes",
                    help="procedural scene cache; empty: generate the scenes in memory (no TFDS needed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    sim = types.SimConfig(max_agents=args.max_agents, max_road_segments=2048, max_lanes=64, obs_road=args.obs_road,
                          enable_idm=False)
    bank = procedural_bank(args.cache_dir, args.scenes, args.agents, sim)
    net = networks.ActorCritic(networks.PRESETS[args.net]())
    params = types.default_params()
    if not args.json:
        print(f"{'envs':>5} | {'agent-steps/s':>13} | {'slot-steps/s':>12} | sim  fwd  learn (share) | "
              f"compile s | peak RSS GB")
    for b in [int(x) for x in args.envs.split(",")]:
        cfg = ppo.PPOConfig(num_envs=b, rollout_steps=args.rollout_steps, update_epochs=args.epochs,
                            num_minibatches=args.minibatches, sample_capacity=args.capacity)
        runner = ppo.init(net, cfg, sim, jax.random.PRNGKey(0), bank)
        t0 = time.perf_counter()
        update = ppo.make_update(net, cfg, sim, params)
        jax.block_until_ready(update(runner, bank))
        compile_s = time.perf_counter() - t0
        rollout = jax.jit(ppo.make_rollout(net, cfg, sim, params))
        scenes = jax.vmap(env.take_scenario, in_axes=(None, 0))(bank, runner.scene_idx)
        t_roll, out = timed(lambda r=rollout, ru=runner, sc=scenes: r(ru, sc, shaping.none())[-1].valid, args.updates)
        valid = float(out.sum())
        t_sim = _sim_time(sim, cfg, params, scenes, runner, args.updates)
        t_upd, _ = timed(lambda u=update, ru=runner: u(ru, bank)[1]["samples"], args.updates)
        slots = b * sim.max_agents * cfg.rollout_steps
        row = dict(envs=b, agent_steps_per_s=valid / t_upd, slot_steps_per_s=slots / t_upd,
                   update_s=t_upd, sim_s=t_sim, forward_s=max(t_roll - t_sim, 0.0), learn_s=max(t_upd - t_roll, 0.0),
                   compile_s=compile_s, peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                   valid_samples=valid, capacity=cfg.capacity(sim))
        if args.json:
            print(json.dumps(row))
        else:
            sh = [row[k] / t_upd for k in ("sim_s", "forward_s", "learn_s")]
            print(f"{b:>5} | {row['agent_steps_per_s']:>13,.0f} | {row['slot_steps_per_s']:>12,.0f} | "
                  f"{sh[0]:.2f} {sh[1]:.2f} {sh[2]:.2f}        | {compile_s:>9.1f} | {row['peak_rss_gb']:.2f}")


def _sim_time(sim, cfg, params, scenes, runner, n):
    """Median time of the rollout's simulation alone: observe + step with random actions, T steps."""

    @jax.jit
    def sim_only(state, key):
        def body(c, _):
            s, k = c
            k, sub = jax.random.split(k)
            obs = jax.vmap(lambda st, sc: env.observe(st, sc, sim))(s, scenes)
            a = jax.random.randint(sub, s.xy.shape[:2], 0, 91) + 0 * obs.ego[..., 0].astype(jnp.int32)
            s, out = jax.vmap(lambda st, ac, sc: env.step(st, ac, sc, params, sim))(s, a, scenes)
            return (s, k), out.active.sum()

        return jax.lax.scan(body, (state, key), None, length=cfg.rollout_steps)[1]

    t, _ = timed(lambda: sim_only(runner.env, jax.random.PRNGKey(1)), n)
    return t


if __name__ == "__main__":
    main()
