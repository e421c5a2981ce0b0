"""The accelerator-sized anchor: the large network (3 x 1024 backbone, separate actor and critic
towers), many parallel scenes, BehaviorBench-like PPO settings, full 128-segment road observation.

    python -m launch.train_anchor --config=experiments/anchor_large.py --workdir=runs/anchor_large \
        [--config.scenes.real=DIR]   # DIR: a cache built by launch.build_scenes with this sim config
"""

from experiments import anchor_small


def get_config():
    c = anchor_small.get_config()
    c.scenes.train = 2048
    c.scenes.eval = 256
    c.sim.obs_road = 128
    c.net.preset = "large"
    c.ppo.num_envs = 1024
    c.ppo.rollout_steps = 90
    c.ppo.num_minibatches = 16
    c.ppo.update_epochs = 1
    c.ppo.compact_groups = 8  # device-local compaction on 1, 2, 4 or 8 devices (ppo.PPOConfig)
    c.ppo.bank_groups = 8  # each device (and host) holds and reads only its 256 scenes (ppo.PPOConfig)
    c.ppo.lr = 3e-4
    c.ppo.vf_coef = 2.0
    c.train.total_updates = 5000
    c.train.log_every = 10
    c.train.ckpt_every = 100
    c.train.eval_every = 250
    return c
