"""Human-regularised PPO (SPICED-style): PPO from the anchor + 0.03 x NLL of tracked log actions
(cp_jax.rl.spiced; on procedural scenes the logs are IDM-driven), at CounterPlay's budget.

    python -m launch.post_train --config=experiments/spiced.py --workdir=runs/spiced
"""

import ml_collections

from experiments import ppo_continue


def get_config() -> ml_collections.ConfigDict:
    c = ppo_continue.get_config()
    c.method = "spiced"
    # Tuned (experiments/tune_small.py, session 34), one factor at a time: lr 3e-5 (64.67 vs 27.46 at 1e-4,
    # 26.97 at 3e-4, all at weight 0.1) and weight 0.03 (49.10 vs 27.46 at 0.1, 24.18 at 0.3, all at lr 1e-4).
    c.ppo.lr = 3e-5
    c.ppo.bc_coef = 0.03
    c.human = ml_collections.ConfigDict(dict(batch=256, stride=4))  # logged samples per update; keep every 4th
    return c
