"""Render procedural scenes (with their logged paths) to PNG.

    python -m launch.render_scenes --kinds=four_way,roundabout --seeds=0:4 --out=runs/scenes
"""

from __future__ import annotations

import os

from absl import flags

from launch import cli

flags.DEFINE_string("out", "runs/scenes", "output directory")
flags.DEFINE_list("kinds", [], "layout kinds (default: all)")
flags.DEFINE_string("seeds", "0:2", "seed range start:stop")
flags.DEFINE_integer("agents", 12, "agents placed per scene")
FLAGS = flags.FLAGS


def main(_):
    import numpy as np

    from cp_jax.scenarios import render
    from cp_jax.scenarios.builder import build_scenario
    from cp_jax.scenarios.procedural import generator, layouts
    from cp_jax.sim import types

    kinds = FLAGS.kinds or list(layouts.LAYOUT_KINDS)
    unknown = [k for k in kinds if k not in layouts.ALL_KINDS]
    if unknown:
        cli.fail(f"--kinds: unknown {unknown}; known: {', '.join(layouts.ALL_KINDS)}")
    try:
        start, stop = (int(x) for x in FLAGS.seeds.split(":"))
    except ValueError:
        cli.fail(f"--seeds={FLAGS.seeds}: expected START:STOP (two ints, e.g. 0:2)")
    os.makedirs(FLAGS.out, exist_ok=True)
    for kind in kinds:
        for seed in range(start, stop):
            raw = generator.generate(seed, kind, FLAGS.agents)
            cfg = types.SimConfig(max_agents=max(8, raw.num_objects), max_road_segments=4096, max_lanes=128,
                                  obs_road=64)
            paths = np.zeros((cfg.max_agents, raw.num_steps, 2))
            paths[: raw.num_objects] = raw.log_xy
            path = os.path.join(FLAGS.out, f"{kind}_{seed}.png")
            render.render(build_scenario(raw, cfg), path, paths=paths, title=f"{raw.name}: logged paths")
            print(path)


if __name__ == "__main__":
    cli.run(main)
