"""PPO-Continue: more self-play PPO from the anchor, at CounterPlay's budget (experiments/counterplay.py).

    python -m launch.post_train --config=experiments/ppo_continue.py --workdir=runs/ppo_continue

The anchor's own PPO settings and training shaping (experiments/anchor_small.py) with a constant
learning rate: the anchor's linear schedule had decayed to zero, so continuing it would not learn.
"""

import ml_collections

from experiments import anchor_small
from experiments.counterplay import base


def get_config() -> ml_collections.ConfigDict:
    c = base("ppo_continue")
    anchor = anchor_small.get_config()
    c.ppo = anchor.ppo
    c.ppo.lr_schedule = "constant"
    c.ppo.lr = 3e-4  # tuned (experiments/tune_small.py, session 34): 65.81 vs 65.79 (3e-5) and 64.81 (1e-4)
    c.shaping = anchor.shaping
    return c
