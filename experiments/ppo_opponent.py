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
    c.ppo.opponent_frac = 0.2
    c.opponent = ml_collections.ConfigDict(dict(pool_size=4, pool_every=5))
    return c
