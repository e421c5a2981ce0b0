"""PPO-Opponent: PPO from the anchor with 20% of the agents driven by past snapshots of the policy
(a pool of 4, a new snapshot every 5 updates; the anchor first), excluded from the loss; at
CounterPlay's budget.

    python -m launch.post_train --config=experiments/ppo_opponent.py --workdir=runs/ppo_opponent
"""

import ml_collections

from experiments import ppo_continue


def get_config() -> ml_collections.ConfigDict:
    c = ppo_continue.get_config()
    c.method = "ppo_opponent"
    # Tuned (experiments/tune_small.py, session 34): lr 3e-5 (65.92 vs 65.92 at 1e-4, by 0.006, and 64.01 at
    # 3e-4), opponent share 0.2 (65.59 at 0.1, 63.93 at 0.4).
    c.ppo.lr = 3e-5
    c.ppo.opponent_frac = 0.2
    c.opponent = ml_collections.ConfigDict(dict(pool_size=4, pool_every=5))
    return c
