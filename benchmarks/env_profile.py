"""Where the simulator's time goes: each part timed alone over the same batched scan.

    python benchmarks/env_profile.py --agents=128 --road_points=20000 --batch=32 --steps=80

Parts: the full observe + step, step alone (random actions that ignore the observation),
observe alone, the road and partner blocks of the observation, and the event checks (SAT overlap,
off-road corner queries, lane frame). Positions and headings are perturbed every iteration
(differently per agent) so nothing is hoisted out of the loop. Prints milliseconds and agent-steps/s per part.
"""

from __future__ import annotations

import time

from absl import app, flags

flags.DEFINE_integer("agents", 128, "agents per scene")
flags.DEFINE_integer("road_points", 20000, "road segments per scene")
flags.DEFINE_integer("batch", 32, "scenes in parallel")
flags.DEFINE_integer("steps", 80, "scan length")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import jax.numpy as jnp

    from cp_jax.scenarios.builder import build_scenario
    from cp_jax.scenarios.procedural.generator import benchmark_scene
    from cp_jax.sim import conditions, env, geometry, observation, types

    a, b, n = FLAGS.agents, FLAGS.batch, FLAGS.steps
    raw = benchmark_scene(a, FLAGS.road_points, 0)
    cfg = types.SimConfig(max_agents=a, max_road_segments=FLAGS.road_points + 256, max_lanes=64,
                          enable_idm=False, remove_on_event=False, obs_partners=min(31, a))
    scenario = build_scenario(raw, cfg)
    params = types.default_params()
    bank = jax.tree.map(lambda x: jnp.broadcast_to(x, (b,) + x.shape), scenario)
    keys = jax.random.split(jax.random.PRNGKey(0), b)
    states = jax.vmap(lambda s, k: env.reset(s, k, conditions.style("normal"), cfg))(bank, keys)
    states = states.replace(controller=jnp.zeros_like(states.controller))
    jitter = jnp.arange(a, dtype=jnp.float32)[:, None] * jnp.array([1.0, -0.5])

    def scan_part(fn):
        """fn(state, scenario, c) -> scalar, scanned n times with a moving perturbation c."""
        def one(s, sc):
            def body(c, _):
                return c + 1e-3, fn(s.replace(xy=s.xy + c * jitter, yaw=s.yaw + c * jitter[:, 0]), sc)
            return jax.lax.scan(body, 0.0, None, length=n)[1].sum()
        return lambda st, bk: jax.vmap(one)(st, bk).sum()

    def rollout(read_obs):
        def one(s, sc):
            def body(s, _):
                key, sub = jax.random.split(s.key)
                s = s.replace(key=key)
                act = jax.random.randint(sub, (a,), 0, 91)
                if read_obs:
                    o = observation.observe(s, sc, cfg)
                    act = (act + (o.flat().sum(-1) > 1e9)) % 91
                s, out = env.step(s, act, sc, params, cfg)
                return s, out.reward.sum()
            return jax.lax.scan(body, s, None, length=n)[1].sum()
        return lambda st, bk: jax.vmap(one)(st, bk).sum()

    parts = {
        "observe + step": rollout(True),
        "step only": rollout(False),
        "observe only": scan_part(lambda s, sc: observation.observe(s, sc, cfg).flat().sum()),
        "  road block": scan_part(lambda s, sc: observation.observe(s, sc, cfg).road.sum()),
        "  partner block": scan_part(lambda s, sc: observation.observe(s, sc, cfg).partners.sum()),
        "  SAT overlap": scan_part(lambda s, sc: geometry.overlap_matrix(s.xy, s.yaw, sc.size).sum()),
        "  off-road": scan_part(lambda s, sc: env.is_offroad(s.xy, s.yaw, sc, cfg).sum()),
        "  lane frame": scan_part(lambda s, sc: geometry.lane_frame(s.xy, s.yaw, sc, cfg)[1].sum()),
    }
    print(f"{a} agents, {int(scenario.road_valid.sum())} segments, batch {b}, {n} steps")
    for name, fn in parts.items():
        f = jax.jit(fn)
        f(states, bank).block_until_ready()
        t0 = time.perf_counter()
        f(states, bank).block_until_ready()
        dt = time.perf_counter() - t0
        print(f"{name:18s} {dt * 1000:8.1f} ms   {a * b * n / dt:>12,.0f} agent-steps/s")


if __name__ == "__main__":
    app.run(main)
