"""The main job (README's first command): post-train the shipped anchor with CounterPlay and with
PPO-Continue at the same small budget, then benchmark anchor vs both on procedural splits.

    python -m launch.main --out=runs/main
    python -m launch.main --out=runs/main --config.budget_frac=0.02 --config.bench.pairs=100

`counterplay` and `ppo_continue` are the two post-training experiments (experiments/counterplay.py,
experiments/ppo_continue.py); budget_frac, seed and anchor here override both, and the anchor is also
the benchmark's traffic anchor. `bench` holds every BenchConfig field (cp_jax/bench/config.py).
"""

import ml_collections

from cp_jax.bench.config import BenchConfig
from cp_jax.jobs.config import section
from experiments import counterplay, ppo_continue


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.anchor = "assets/anchors/conditioned_small"
    c.budget_frac = 0.01  # of the anchor's training transitions, for each method
    c.seed = 0
    c.counterplay = counterplay.get_config()
    c.ppo_continue = ppo_continue.get_config()
    c.bench = section(BenchConfig, exclude=("anchor_policy",), figures=4)
    return c
