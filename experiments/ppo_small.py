"""The non-conditioned PPO policy of the benchmark's "PPO" traffic regime (CPU size).

Same scenes, network and trainer as experiments/anchor_small.py; the reward is fixed (goal +1,
collision -0.5, off-road -0.5), every agent gets the normal style (its 2 m goal radius) and the
network ignores the condition input.

    python -m launch.train_anchor --config=experiments/ppo_small.py --workdir=runs/ppo_small
"""

import ml_collections

from experiments import anchor_small


def get_config():
    c = anchor_small.get_config()
    c.ppo.conditioned = False
    c.ppo.ent_coef = 0.01  # no comfort term here: less entropy pressure needed (run p1, docs/log.md)
    c.ppo.lr = 5e-4  # the shipped ppo_small's settings (run p2), not the conditioned anchor's
    c.ppo.style_frac = 0.0
    c.shaping.progress_per_m = 0.0  # the fixed reward alone (run p2); the other weights act on conditions only
    c.train.total_updates = 1800
    c.train.eval_styles = ("normal",)
    # the shipped ppo_small predates the per-feature observation gains; its continuations keep its network
    c.net.overrides = ml_collections.ConfigDict(dict(obs_gain=False))
    return c
