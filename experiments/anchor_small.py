"""The CPU-sized reward-conditioned anchor: procedural scenes, the small network, self-play PPO.

    python -m launch.train_anchor --config=experiments/anchor_small.py --workdir=runs/anchor_small
    python -m launch.train_anchor --config=experiments/anchor_small.py --config.ppo.lr=1e-4 --workdir=...

Fields: seed; scenes (procedural train / held-out counts and seeds, agents per scene, where the
converted banks are cached, optionally a converted real-scene cache); sim (SimConfig fields); net
(a preset name plus NetConfig overrides); ppo (PPOConfig fields); train (length, logging,
checkpoints, evaluation).
"""

import ml_collections


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
        cache_dir="~/.cache/cp_jax/scenes",  # converted banks are cached here (TFDS ArrayRecord)
        # optional: a converted real-scene cache mixed into training, built with the training's stored sizes:
        # python -m launch.build_scenes --src=../shared/data/womd_json --files=0:10 --max_agents=16
        #     --max_road_segments=2048 --max_lanes=64 --out=DIR   (scenes truncated around the SDC by
        #     builder.fit_to_config; --files=0:10 keeps files 10: for held-out splits, launch.make_splits)
        real="",
    ))
    c.sim = ml_collections.ConfigDict(dict(
        max_agents=16, max_road_segments=2048, max_lanes=64, obs_road=64, grid_size=32,
        remove_on_event=True, enable_idm=False,
    ))
    c.net = ml_collections.ConfigDict(dict(preset="small", overrides=ml_collections.ConfigDict()))
    c.ppo = ml_collections.ConfigDict(dict(
        num_envs=32, rollout_steps=45, rollouts_per_scene=4, sample_capacity=0.3, update_epochs=2,
        compact_groups=1,  # set to a multiple of the device count for device-local compaction (ppo.PPOConfig)
        bank_groups=1,  # > 1 (a multiple of the device count): each device/host holds and reads only its scene groups
        num_minibatches=4, lr=1e-3, lr_schedule="linear",
        max_grad_norm=0.5, gamma=0.98, gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5, ent_coef=0.02,
        norm_adv=True, adv_filter=False, conditioned=True, fixed_style="normal", goal_radius_range=(2.0, 12.0),
        goal_radius_power=1.0,  # > 1 skews the sampled goal radius towards its low end (ppo.PPOConfig)
        style_frac=0.5,  # share of agents given one of the five named styles instead of a uniform sample
        shared_style_frac=0.0,  # share of episodes where every agent shares one named style (ppo.PPOConfig)
        # Training-only shaping (ppo.PPOConfig): reward per metre of progress towards the goal along
        # the lane route ("route_goal"; "route": arc gained, paid past the goal too; "goal": straight
        # line); 0 is the paper's reward alone. The shipped anchor (every stage) trained with these, so
        # PPO-Continue continues with them too.
        progress_per_m=0.08, progress_along="route_goal",
        progress_urgency=0.0,  # > 0: collision-tolerant conditions paid more per metre (ppo.PPOConfig)
        risk_penalty=0.0, risk_horizon=2.0,  # > 0: conflict shaping weighted by the condition's alpha_coll
        # Training-only weights of the shipped anchor's last two stages (b40, b41; PPO-Continue continues
        # with them): a collision costs (1 + 8 alpha_coll / 3) alpha_coll, a comfort violation 0.3
        # alpha_comfort. Its first stage (b24) ran with 0 / False / 1.0 (assets/anchors/conditioned_small).
        collision_gain=8.0,  # > 0: a collision costs (1 + gain) x alpha_coll in training (ppo.PPOConfig)
        collision_gain_by_weight=True,  # True: (1 + gain x alpha_coll / 3) x alpha_coll instead (ppo.PPOConfig)
        comfort_scale=0.3,  # < 1: policy agents pay comfort_scale x alpha_comfort per violation (ppo.PPOConfig)
        comfort_scope="all",  # "braking": comfort_scale applies to braking violations only (ppo.PPOConfig)
        log_frac=0.0,  # share of agents replaying their logs each episode (mixed traffic; not trained on)
        idm_frac=0.0,  # share of agents driven by IDM each episode (needs sim.enable_idm=True; not trained on)
        bc_coef=0.0,  # > 0: + bc_coef x NLL of the training scenes' logged actions (human-regularised PPO)
    ))
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
