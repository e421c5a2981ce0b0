"""Human-regularised PPO (SPICED-style): PPO from the anchor + 0.1 x NLL of tracked log actions
(cp_jax.rl.spiced; on procedural scenes the logs are IDM-driven), at CounterPlay's budget.

    python -m launch.post_train --config=experiments/spiced.py --workdir=runs/spiced
"""

import ml_collections

from experiments import ppo_continue


def get_config() -> ml_collections.ConfigDict:
    c = ppo_continue.get_config()
    c.method = "spiced"
    c.ppo.bc_coef = 0.1
    c.human = ml_collections.ConfigDict(dict(batch=256, stride=4))  # logged samples per update; keep every 4th
    return c
