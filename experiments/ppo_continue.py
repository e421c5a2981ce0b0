"""PPO-Continue: more self-play PPO from the anchor, at CounterPlay's budget (experiments/counterplay.py).

    python -m launch.post_train --config=experiments/ppo_continue.py --workdir=runs/ppo_continue

The anchor's own PPO settings (experiments/anchor_small.py, including its route-progress shaping and,
since session 19, its last stages' collision gain and comfort scale) with a constant learning rate: the anchor's linear schedule had decayed to zero, so continuing it
would not learn at all. (Sessions 1-14's sweeps ran it without shaping: the anchors had none.)
"""

import ml_collections

from experiments import anchor_small
from experiments.counterplay import base


def get_config() -> ml_collections.ConfigDict:
    c = base("ppo_continue")
    c.ppo = ml_collections.ConfigDict(anchor_small.get_config().ppo.to_dict())
    c.ppo.lr_schedule = "constant"
    c.ppo.lr = 1e-4
    return c
