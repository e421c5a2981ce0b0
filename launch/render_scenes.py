"""Render procedural scenes (with their logged paths) to PNG.

    python -m launch.render_scenes --kinds=four_way,roundabout --seeds=0:4 --out=runs/scenes

Bad --kinds, --seeds (not START:STOP with 0 <= START < STOP) or --agents (< 1), and an --out that is a
file, are usage errors (exit 2) before anything is drawn. A scene that fails is reported (`skip NAME:
REASON` on stderr) and the others drawn; exits 1 when none was. Each PNG is written under a temporary
name and moved into place once complete.
"""

from __future__ import annotations

import os
import sys

from absl import flags

from launch import cli

flags.DEFINE_string("out", "runs/scenes", "output directory")
flags.DEFINE_list("kinds", [], "layout kinds (default: all)")
flags.DEFINE_string("seeds", "0:2", "seed range START:STOP (0 <= START < STOP)")
flags.DEFINE_integer("agents", 12, "agents placed per scene", lower_bound=1)
FLAGS = flags.FLAGS


def seed_range(spec: str) -> range:
    """--seeds START:STOP -> range(START, STOP); ValueError naming the flag unless 0 <= START < STOP."""
    try:
        start, stop = (int(x) for x in spec.split(":"))
    except ValueError:
        raise ValueError(f"--seeds={spec}: expected START:STOP (two ints, e.g. 0:2)") from None
    if not 0 <= start < stop:
        raise ValueError(f"--seeds={spec}: expected START:STOP with 0 <= START < STOP (e.g. 0:2), got no seeds"
                         if start >= stop >= 0 else f"--seeds={spec}: seeds must be >= 0 (e.g. 0:2)")
    return range(start, stop)


def main(_):
    with cli.checking():
        seeds = seed_range(FLAGS.seeds)
        if os.path.exists(FLAGS.out) and not os.path.isdir(FLAGS.out):
            raise ValueError(f"--out={FLAGS.out}: a file, not a folder (where the PNGs are written)")
    import numpy as np

    from cp_jax.scenarios import render
    from cp_jax.scenarios.builder import build_scenario
    from cp_jax.scenarios.procedural import generator, layouts
    from cp_jax.sim import types

    kinds = FLAGS.kinds or list(layouts.LAYOUT_KINDS)
    unknown = [k for k in kinds if k not in layouts.ALL_KINDS]
    if unknown:
        cli.fail(f"--kinds: unknown {unknown}; known: {', '.join(layouts.ALL_KINDS)}")
    os.makedirs(FLAGS.out, exist_ok=True)
    drawn = skipped = 0
    for kind in kinds:
        for seed in seeds:
            try:
                raw = generator.generate(seed, kind, FLAGS.agents)
                cfg = types.SimConfig(max_agents=max(8, raw.num_objects), max_road_segments=4096, max_lanes=128,
                                      obs_road=64)
                paths = np.zeros((cfg.max_agents, raw.num_steps, 2))
                paths[: raw.num_objects] = raw.log_xy
                path = os.path.join(FLAGS.out, f"{kind}_{seed}.png")
                partial = os.path.join(FLAGS.out, f".{kind}_{seed}.partial.png")
                render.render(build_scenario(raw, cfg), partial, paths=paths, title=f"{raw.name}: logged paths")
                os.replace(partial, path)
            except Exception as e:  # one scene never stops the others: every reason is reported
                print(f"skip {kind}_{seed}: {type(e).__name__}: {e}", file=sys.stderr)
                skipped += 1
                continue
            drawn += 1
            print(path)
    if not drawn:
        cli.fail(f"no scene drawn ({skipped} skipped: the reasons are above)", code=1)

if __name__ == "__main__":
    cli.run(main)
