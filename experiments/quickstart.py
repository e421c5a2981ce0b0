"""The quickstart's experiment: procedural scenes and non-learned controllers.

Override any field from the command line, e.g.
    python -m launch.quickstart --config=experiments/quickstart.py --config.scenes=28 --config.style=cautious
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.scenes = 14  # procedural scenes, cycling through every layout kind
    c.agents = 12  # agents placed per scene
    c.seed = 200_000  # scene seeds seed, seed+1, ...: never used to train or evaluate the shipped anchors
    c.style = "normal"  # reward condition of every agent (a named style)
    c.controllers = ("log", "idm", "const_vel", "policy")  # policy = random discrete actions
    c.anchor = "assets/anchors/conditioned_small"  # a saved policy also evaluated (greedy); "" to skip
    c.sim = ml_collections.ConfigDict(dict(
        max_road_segments=2048, max_lanes=64, obs_road=128, grid_size=32, remove_on_event=True,
    ))
    return c
