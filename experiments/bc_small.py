"""The benchmark's "SMART stand-in (BC)" traffic policy: behaviour cloning on inverse-dynamics labels.

No SMART weights are obtainable offline; this policy is cloned from the logged motion of the
procedural scenes (and of converted real scenes when given), with labels recovered by closed-loop
tracking through the simulator's own actuator and bicycle (cp_jax/rl/bc.py). It is NOT SMART.

    python -m launch.train_bc --config=experiments/bc_small.py --workdir=runs/bc_small
    python -m launch.train_bc --config=experiments/bc_small.py --config.scenes.real=DIR --workdir=...
    # an anchor-shaped (conditioned) clone for train_anchor's config.init_from:
    python -m launch.train_bc --config=experiments/bc_small.py --config.net.overrides.condition=True --workdir=...

Scenes, SimConfig and network preset are experiments/anchor_small.py's (the same cached banks; the
benchmark loads the result like any saved policy); the network has no condition branch, like
experiments/ppo_small.py, unless net.overrides.condition is set. Fields: seed; scenes; sim; net;
bc (cp_jax.rl.bc.BCConfig fields); train.
"""

import ml_collections

from cp_jax.jobs.config import section
from cp_jax.rl.bc import BCConfig
from experiments import anchor_small


def get_config() -> ml_collections.ConfigDict:
    base = anchor_small.get_config()
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.scenes = base.scenes  # train 112 (seeds 0-111), held-out 28 (seeds 100000+), optional real cache
    c.sim = base.sim
    # condition=True: an anchor-shaped network (condition slot = bc.style) that train_anchor can start from
    c.net = ml_collections.ConfigDict(dict(preset="small", overrides=ml_collections.ConfigDict(dict(condition=False))))
    c.bc = section(BCConfig)  # the shipped smart_bc's settings are BCConfig's defaults
    c.train = ml_collections.ConfigDict(dict(
        evaluate=True,  # closed-loop self-play on the held-out scenes at the end (eval.json)
        progress=True,
    ))
    return c
