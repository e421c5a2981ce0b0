"""Simulator throughput: agent-steps per second of observe + step with random policy actions.

    python benchmarks/env_throughput.py --agents=128 --road_points=20000 --batch=32 --steps=80 --json

Every agent slot is a real car stepped by the bicycle model (random discrete actions that also
read the observation, so observe() cannot be optimised away) in "keep driving" mode, so all of
them stay in the world; collision (all pairs, SAT), off-road (grid index), goal and the
conditioned reward are computed every step. compile_s is the XLA compile of the whole batched
rollout; agent_steps_per_s is the best of --repeats timed runs after it. With --json the last line
is a JSON object.
"""

from __future__ import annotations

import json
import os
import resource
import time

from absl import app, flags

flags.DEFINE_integer("agents", 128, "agents per scene (all stepped)")
flags.DEFINE_integer("road_points", 20000, "road segments per scene")
flags.DEFINE_integer("batch", 32, "scenes stepped in parallel (vmap)")
flags.DEFINE_integer("steps", 80, "steps per rollout (lax.scan)")
flags.DEFINE_integer("repeats", 3, "timed runs; the best is reported")
flags.DEFINE_integer("seed", 0, "scene seed")
flags.DEFINE_string("kind", "four_way", "procedural layout of the benchmark scene")
flags.DEFINE_bool("json", False, "print a JSON object as the last line")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import jax.numpy as jnp

    from cp_jax.scenarios.builder import build_scenario
    from cp_jax.scenarios.procedural.generator import benchmark_scene
    from cp_jax.sim import conditions, env, types

    a, b, n = FLAGS.agents, FLAGS.batch, FLAGS.steps
    raw = benchmark_scene(a, FLAGS.road_points, FLAGS.seed, FLAGS.kind)
    n_seg = sum(len(p) - 1 for p in raw.lanes) + sum(len(p) - 1 for p in raw.edges)
    n_seg += sum(len(p) - 1 for _, p in raw.others)
    cfg = types.SimConfig(
        max_agents=a, max_road_segments=max(n_seg, 256), max_lanes=64,
        log_steps=91, episode_steps=90, enable_idm=False, obs_partners=min(31, a - 1),
        obs_road=min(128, n_seg), remove_on_event=False,
    )
    scenario = build_scenario(raw, cfg)
    params = types.default_params()
    bank = jax.tree.map(lambda x: jnp.broadcast_to(x, (b,) + x.shape), scenario)
    keys = jax.random.split(jax.random.PRNGKey(FLAGS.seed), b)
    far = scenario.goal.at[:].set(1e4)  # nobody finishes: every slot is stepped every step
    bank = bank.replace(goal=jnp.broadcast_to(far, (b,) + far.shape))
    cond = conditions.style("normal")
    states = jax.vmap(lambda s, k: env.reset(s, k, cond, cfg))(bank, keys)
    # Every slot is driven by the bicycle and stays in the world ("keep driving" mode), even the
    # few cars that start overlapping another (the eligibility rule would replay them instead).
    states = states.replace(controller=jnp.full_like(states.controller, types.POLICY))
    controlled = int(jnp.sum(states.controller[0] == types.POLICY))

    def policy(p, obs, s, key):
        noise = (obs.flat().sum(-1) > 1e9).astype(jnp.int32)  # consumes the observation
        return (jax.random.randint(key, (a,), 0, 91) + noise) % 91

    def run(states, bank):
        def one(s, sc):
            final, traj = env.rollout(policy, None, s, sc, params, cfg, n)
            return final.t + jnp.sum(traj.out.reward) + jnp.sum(traj.out.collided)
        return jnp.sum(jax.vmap(one)(states, bank))

    t0 = time.perf_counter()
    compiled = jax.jit(run).lower(states, bank).compile()
    compile_s = time.perf_counter() - t0
    compiled(states, bank).block_until_ready()
    times = []
    for _ in range(FLAGS.repeats):
        t0 = time.perf_counter()
        compiled(states, bank).block_until_ready()
        times.append(time.perf_counter() - t0)
    best = min(times)
    result = dict(
        agent_steps_per_s=a * b * n / best,
        controlled_agent_steps_per_s=controlled * b * n / best,
        compile_s=compile_s,
        run_s=best,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        agents=a, controlled_agents=controlled, road_segments=n_seg, batch=b, steps=n,
        backend=jax.default_backend(), device=str(jax.devices()[0]),
        xla_flags=os.environ.get("XLA_FLAGS", ""), jax_version=jax.__version__,
    )
    print(
        f"agents={a} road={n_seg} batch={b} steps={n}: {result['agent_steps_per_s']:,.0f} agent-steps/s "
        f"(compile {compile_s:.1f}s, run {best:.3f}s, peak RSS {result['peak_rss_mb']:.0f} MB)"
    )
    if FLAGS.json:
        print(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
