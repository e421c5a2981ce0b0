"""The self-play evaluation job behind `launch.evaluate_policy`: a saved policy on held-out procedural
scenes, every controllable agent driven by it, per named style.

    results = evaluate_policy("assets/anchors/conditioned_small", ("normal", "aggressive"), scenes=28)

Goal / collision / off-road / timeout rates, the share of agents at fault for their collision (the
benchmark's classifier, every agent taken as the ego) and mean speed per style, greedy actions unless
sampled. mixed: the styles mixed in every world, rotated so every agent drives under each once
(`rl.evaluate.evaluate_mixed`), instead of one world per style where every agent shares it. The
defaults are the training job's held-out scenes (seeds never used in training).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cp_jax.bench import metrics as bench_metrics
from cp_jax.policy import saved
from cp_jax.rl import evaluate
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import conditions, types


def evaluate_policy(policy: str, styles, scenes: int = 28, seed: int = 100_000, agents: int = 12,
                    sampled: bool = False, mixed: bool = False, at_fault: bool = True,
                    cache_dir: str = "~/.cache/cp_jax/scenes") -> dict[str, dict]:
    """{style: rates} (module docstring); an unknown style raises before any work."""
    for style in styles:
        conditions.style(style)
    pol = saved.load(policy)
    _, bank = bank_lib.cached_procedural_bank(cache_dir, scenes, seed, agents, pol.sim)
    key, params = jax.random.PRNGKey(0), types.default_params()
    classify = bench_metrics.at_fault_in if at_fault else None
    if mixed:
        conds = jnp.stack([conditions.style(style) for style in styles])
        rates = evaluate.evaluate_mixed(pol.net, pol.params, bank, conds, params, pol.sim, key, greedy=not sampled,
                                        classify=classify)
    else:
        rates = [evaluate.summarise(evaluate.evaluate(pol.net, pol.params, bank, conditions.style(style), params,
                                                      pol.sim, key, greedy=not sampled, classify=classify))
                 for style in styles]
    return {style: {("at_fault" if k == "classified" else k): round(v, 3) if isinstance(v, float) else v
                    for k, v in r.items()}
            for style, r in zip(styles, rates, strict=True)}
