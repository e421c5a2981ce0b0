"""PPO-Rewind: PPO from the anchor whose episodes restart from backtracked states of failed episodes
(no style change), at CounterPlay's budget; failures and roots as in experiments/counterplay.py.

    python -m launch.post_train --config=experiments/ppo_rewind.py --workdir=runs/ppo_rewind
"""

import ml_collections

from experiments import counterplay, ppo_continue


def get_config() -> ml_collections.ConfigDict:
    c = ppo_continue.get_config()
    c.method = "ppo_rewind"
    c.counterplay = counterplay.get_config().counterplay  # record size, failure kinds, root rule and window
    # Tuned (experiments/tune_small.py, session 34): lr 1e-4 (66.34 vs 65.75 at 3e-5, 65.55 at 3e-4), rewind
    # window 30 (65.09 at 10, 64.99 at 50).
    c.ppo.lr = 1e-4
    return c
