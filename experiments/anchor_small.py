"""The CPU-sized reward-conditioned anchor: procedural scenes, the small network, self-play PPO.

    python -m launch.train_anchor --config=experiments/anchor_small.py --workdir=runs/anchor_small
    python -m launch.train_anchor --config=experiments/anchor_small.py --config.ppo.lr=1e-4 --workdir=...

Fields: seed; init_from; scenes (procedural train / held-out counts and seeds, agents per scene,
where the converted banks are cached, optionally a converted real-scene cache); sim (SimConfig);
net (a preset name plus NetConfig overrides); ppo (PPOConfig); shaping (rl/shaping.py: training-only
reward shaping); train (length, logging, checkpoints, evaluation). Sections hold every field of
their dataclass; this file states only what differs from its defaults.
"""

import ml_collections

from cp_jax.jobs.config import section
from cp_jax.rl.ppo import PPOConfig
from cp_jax.sim.types import SimConfig


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.init_from = ""  # a saved policy folder (e.g. assets/anchors/conditioned_small) to start from
    c.scenes = ml_collections.ConfigDict(dict(
        train=112,  # procedural training scenes, seeds train_seed .. train_seed + train - 1
        train_seed=0,
        eval=28,  # held-out procedural scenes (seeds never used in training)
        eval_seed=100_000,
        agents=12,  # agents placed per procedural scene
        kinds=(),  # layout kinds of the training scenes, cycled by seed (empty: the seven of LAYOUT_KINDS)
        cache_dir="~/.cache/cp_jax/scenes",  # converted banks are cached here (TFDS ArrayRecord)
        # optional: a converted real-scene cache mixed into training, built with the training's stored sizes:
        # python -m launch.build_scenes --src=../shared/data/womd_json --files=0:10 --max_agents=16
        #     --max_road_segments=2048 --max_lanes=64 --out=DIR   (scenes truncated around the SDC by
        #     builder.fit_to_config; --files=0:10 keeps files 10: for held-out splits, launch.make_splits)
        real="",
        # optional: stream the training scenes from a large cache instead (scenes.train at a time, a new bank
        # every refresh_every updates; kinds and real do not apply): python -m launch.build_scenes
        #     --format=procedural --procedural_scenes=20000 --kinds=ALL --max_agents=16 --max_road_segments=2048
        #     --max_lanes=64 --workers=2 --shards=40 --out=DIR
        stream="",
        refresh_every=40,
    ))
    c.sim = section(SimConfig, max_agents=16, obs_road=64, enable_idm=False)
    c.net = ml_collections.ConfigDict(dict(preset="small", overrides=ml_collections.ConfigDict()))
    # total_updates comes from train.total_updates (it also sets the learning-rate schedule)
    c.ppo = section(PPOConfig, exclude=("total_updates",), sample_capacity=0.3, update_epochs=2, lr=1e-3,
                    lr_schedule="linear", ent_coef=0.02, style_frac=0.5)
    # Training-only shaping of the shipped anchor (rl/shaping.py; PPO-Continue continues with it): progress
    # along the lane route towards the goal (every stage); a collision costs (1 + 8 alpha_coll / 3) alpha_coll
    # and a comfort violation 0.3 alpha_comfort (its last two stages, b40 and b41; its first, b24, ran with
    # collision_gain=0, gain_by_weight=False, comfort_scale=1.0). Its real-road stages (b73, b80) add
    # --config.shaping.ttc_gain=1 with eight kinds, 448 scenes and log_frac 0.6 as flags
    # (assets/anchors/conditioned_small/README.md, docs/measurements/real_scenes.md).
    c.shaping = ml_collections.ConfigDict(dict(progress_per_m=0.08, collision_gain=8.0, gain_by_weight=True,
                                               comfort_scale=0.3, ttc_gain=0.0, ttc_horizon=3.0))
    c.human = ml_collections.ConfigDict(dict(batch=256, stride=4))  # bc_coef's logged samples per update; every 4th
    c.train = ml_collections.ConfigDict(dict(
        total_updates=1200,  # sets the learning-rate schedule too
        log_every=5,  # updates between metric lines
        ckpt_every=20,  # updates between checkpoints
        keep=3,  # checkpoints kept
        eval_every=300,  # updates between held-out evaluations (0: only at the end)
        eval_styles=("normal", "aggressive", "cautious"),
        progress=True,
        devices=0,  # data parallelism over this many devices (0: every device of every host)
    ))
    return c
