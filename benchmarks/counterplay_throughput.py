"""CounterPlay post-training throughput: agent-steps/s of one round and where the time goes.

    python benchmarks/counterplay_throughput.py --failures=16,32,64 [--rounds=3 --policy=DIR]

For each number of failures per round F (record of --envs episodes, F failures x (1 + 5 styles)
branches, re-runs of factual + chosen retry, --distill_steps gradient steps), after compilation,
median of --rounds rounds of the shipped anchor on the anchor's training scenes:

  agent-steps/s   POLICY agent-steps charged to the budget per second (records + branches + re-runs)
  record share    time of the record alone / the whole round
  search share    the same round with 1 gradient step, minus the record (failures, backtrack,
                  branches, verification, one distillation step)
  distill share   the rest (the other distill_steps - 1 gradient steps)

plus compile time and peak RSS. --json prints one JSON line per row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time

import jax
from common import timed  # benchmarks/common.py (scripts run as python benchmarks/NAME.py)

from cp_jax.counterplay import loop, record
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import saved
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--failures", default="16,32,64", help="comma-separated failures per round")
    ap.add_argument("--envs", type=int, default=16, help="recorded episodes per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--distill_steps", type=int, default=8)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small")
    ap.add_argument("--scenes", type=int, default=112)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    pol = saved.load(args.policy)
    sim, params = pol.sim, types.default_params()
    _, bank = bank_lib.cached_procedural_bank(args.cache_dir, args.scenes, 0, args.agents, sim)
    if not args.json:
        print(f"{'F':>4} | {'agent-steps/s':>13} | {'round s':>7} | record search distill (share) | compile s | "
              f"peak RSS GB | device")
    for f in [int(x) for x in args.failures.split(",")]:
        cfg = CounterPlayConfig(num_envs=args.envs, max_failures=f, root_rule="fixed", window=30,
                                distill_steps=args.distill_steps)
        state = loop.init(pol.params, cfg, jax.random.PRNGKey(0))
        t0 = time.perf_counter()
        round_fn = loop.make_round(pol.net, cfg, sim, params)
        jax.block_until_ready(round_fn(state, pol.params, bank))
        compile_s = time.perf_counter() - t0
        t_round, (_, diag) = timed(lambda s=state, r=round_fn: r(s, pol.params, bank), args.rounds)
        rec_fn = jax.jit(lambda k, c=cfg: record.record(pol.net, pol.params, bank, k, c, params, sim).agent_steps)
        t_rec, _ = timed(lambda r=rec_fn: r(jax.random.PRNGKey(1)), args.rounds)
        no_learn = dataclasses.replace(cfg, distill_steps=1)
        search_fn = loop.make_round(pol.net, no_learn, sim, params)
        t_search, _ = timed(lambda s=state, r=search_fn: r(s, pol.params, bank), args.rounds)
        steps = float(diag["round_steps"])
        row = dict(failures=f, envs=args.envs, agent_steps_per_s=steps / t_round, round_s=t_round,
                   round_steps=steps, record_share=t_rec / t_round,
                   search_share=max(t_search - t_rec, 0.0) / t_round,
                   distill_share=max(t_round - t_search, 0.0) / t_round, compile_s=compile_s,
                   peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                   device=str(jax.devices()[0]))
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{f:>4} | {row['agent_steps_per_s']:>13,.0f} | {t_round:>7.2f} | {row['record_share']:.2f}   "
                  f"{row['search_share']:.2f}   {row['distill_share']:.2f}          | {compile_s:>9.1f} | "
                  f"{row['peak_rss_gb']:>11.2f} | {row['device']}", flush=True)


if __name__ == "__main__":
    main()
