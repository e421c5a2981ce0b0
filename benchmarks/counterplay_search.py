"""How often the search repairs a failure, per root rule, on a saved anchor.

    python benchmarks/counterplay_search.py [--variants=value,fixed30 --rounds=4 --policy=DIR]

For each variant: --rounds CounterPlay rounds (32 failures each, 16 recorded episodes, one gradient
step per round so the policy barely moves) from PRNGKey(0) on the anchor's training scenes; prints
the failures picked (timeouts among them), the mean rewind (decisions back from the failure),
retries passing the filter, failures repaired (a retry verified, re-run included), factual
branches that reached the goal anyway, and the agent-steps charged.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from cp_jax.counterplay import loop
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import saved
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import types

VARIANTS = {
    "value": dict(),
    "fixed10": dict(root_rule="fixed", window=10),
    "fixed30": dict(root_rule="fixed"),
    "fixed50": dict(root_rule="fixed", window=50),
    "none": dict(root_rule="none"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small")
    ap.add_argument("--scenes", type=int, default=112)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    pol = saved.load(args.policy)
    sim = pol.sim
    _, bank = bank_lib.cached_procedural_bank(args.cache_dir, args.scenes, 0, args.agents, sim)
    if not args.json:
        print(f"{'variant':>26} | picked (timeouts) | rewind | passed | repaired | factual ok | agent-steps | s")
    for name in args.variants.split(","):
        cfg = CounterPlayConfig(max_failures=32, distill_steps=1, **VARIANTS[name])
        round_fn = loop.make_round(pol.net, cfg, sim, types.default_params())
        state = loop.init(pol.params, cfg, jax.random.PRNGKey(0))
        tot = dict(picked=0.0, picked_timeout=0.0, root_back=0.0, passed=0.0, repaired=0.0, factual_goal=0.0,
                   round_steps=0.0)
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            state, diag = round_fn(state, pol.params, bank)
            diag = jax.device_get(diag)
            for k in tot:
                tot[k] += float(np.sum(diag["passed_style"])) if k == "passed" else float(diag[k])
        row = dict(variant=name, **tot, root_back=tot["root_back"] / args.rounds, seconds=time.perf_counter() - t0)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{name:>26} | {tot['picked']:>6.0f} ({tot['picked_timeout']:>3.0f})      | "
                  f"{row['root_back']:>6.1f} | {tot['passed']:>6.0f} | {tot['repaired']:>8.0f} | "
                  f"{tot['factual_goal']:>10.0f} | "
                  f"{tot['round_steps']:>11,.0f} | {row['seconds']:.0f}", flush=True)


if __name__ == "__main__":
    main()
