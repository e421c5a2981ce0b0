"""Simulator throughput: agent-steps per second of observe + step with random policy actions.

    python benchmarks/env_throughput.py --agents=128 --road_points=20000 --batch=32 --steps=80 --json

Every agent slot is a real car stepped by the bicycle model (random discrete actions that also
read the observation, so observe() cannot be optimised away) in "keep driving" mode, so all of
them stay in the world; collision (all pairs, SAT), off-road (grid index), goal and the
conditioned reward are computed every step. compile_s is the XLA compile of the whole batched
rollout; agent_steps_per_s is the best of --repeats timed runs after it. With --json the last line
is a JSON object.

With --scenes (a converted cache), only the eligible vehicles are driven (observed with
observe_agents); everyone else replays the log, and step checks events / rewards for the
--max_controlled rows per scene (SimConfig.max_controlled). It prints how many eligible agents
that limit forced to replay their log: the figure is valid only when that is 0.
"""

from __future__ import annotations

import dataclasses
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
flags.DEFINE_string("scenes", None, "a converted scene cache (launch.build_scenes --out); replaces the "
                    "procedural benchmark scene: all its scenes batched (repeated to --batch if larger)")
flags.DEFINE_integer("max_controlled", 48, "with --scenes: SimConfig.max_controlled, the non-log agent slots per "
                     "scene whose events and reward step computes (0 = None: all slots); the 20 real scenes have "
                     "at most 45 eligible vehicles in one scene")
flags.DEFINE_bool("json", False, "print a JSON object as the last line")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import jax.numpy as jnp

    from cp_jax.scenarios.builder import build_scenario
    from cp_jax.scenarios.procedural.generator import benchmark_scene
    from cp_jax.sim import conditions, env, types

    b, n = FLAGS.batch, FLAGS.steps
    cond = conditions.style("normal")
    if FLAGS.scenes:
        # Real scenes from a cache: controlled = eligible vehicles (moving, not parked, not within
        # the goal radius at t=0); everyone else replays the log.
        from cp_jax.scenarios.cache import ScenarioCache

        cache = ScenarioCache(FLAGS.scenes)
        cfg = dataclasses.replace(cache.cfg, enable_idm=False, remove_on_event=False,
                                  max_controlled=min(FLAGS.max_controlled, cache.cfg.max_agents) or None)
        _, bank = cache.load_bank([i % len(cache) for i in range(b)])  # --batch scenes (repeated if > cache)
        b = jax.tree.leaves(bank)[0].shape[0]
        keys = jax.random.split(jax.random.PRNGKey(0), b)
        states = jax.vmap(lambda sc, k: env.reset(sc, k, cond, cfg))(bank, keys)
        # Eligible agents beyond max_controlled per scene replay their log: none may, for a fair figure.
        every = dataclasses.replace(cfg, max_controlled=None)
        eligible = jax.vmap(lambda sc, k: env.reset(sc, k, cond, every))(bank, keys).controller != types.LOG
        forced_to_log = int(jnp.sum(eligible)) - int(jnp.sum(states.controller != types.LOG))
        print(f"max_controlled={cfg.max_controlled}: {forced_to_log} eligible agents forced to replay their log"
              + ("" if forced_to_log == 0 else " -- NOT a valid benchmark figure, raise --max_controlled"))
        n_seg = int(jnp.max(jnp.sum(bank.road_valid, -1)))
    else:
        forced_to_log = 0
        raw = benchmark_scene(FLAGS.agents, FLAGS.road_points, FLAGS.seed, FLAGS.kind)
        n_seg = sum(len(p) - 1 for p in raw.lanes) + sum(len(p) - 1 for p in raw.edges)
        n_seg += sum(len(p) - 1 for _, p in raw.others)
        cfg = types.SimConfig(
            max_agents=FLAGS.agents, max_road_segments=max(n_seg, 256), max_lanes=64,
            log_steps=91, episode_steps=90, enable_idm=False, obs_partners=min(31, FLAGS.agents - 1),
            obs_road=min(128, n_seg), remove_on_event=False,
        )
        scenario = build_scenario(raw, cfg)
        bank = jax.tree.map(lambda x: jnp.broadcast_to(x, (b,) + x.shape), scenario)
        states = jax.vmap(lambda s, k: env.reset(s, k, cond, cfg))(bank, jax.random.split(jax.random.PRNGKey(0), b))
        # Every slot is driven by the bicycle and stays in the world ("keep driving" mode), even the
        # few cars that start overlapping another (the eligibility rule would replay them instead).
        states = states.replace(controller=jnp.full_like(states.controller, types.POLICY))
    # Nobody finishes: every controlled agent is stepped every step.
    bank = bank.replace(goal=jnp.full_like(bank.goal, 1e4))
    a = cfg.max_agents
    controlled = int(jnp.sum(states.controller == types.POLICY))
    objects = int(jnp.sum(bank.agent_valid))  # real objects (slots hold padding too)
    params = types.default_params()

    def policy(p, obs, s, key):  # random actions, one per observed row
        noise = (obs.flat().sum(-1) > 1e9).astype(jnp.int32)  # consumes the observation
        return (jax.random.randint(key, noise.shape, 0, 91) + noise) % 91

    if FLAGS.scenes:
        # Observe only the controlled agents (one flat batch of rows across scenes).
        import numpy as np

        scene_idx, agent_idx = np.nonzero(np.asarray(states.controller == types.POLICY))
        scene_idx, agent_idx = jnp.asarray(scene_idx, jnp.int32), jnp.asarray(agent_idx, jnp.int32)

        def run(states, bank):
            final, (_, out) = env.rollout_rows(policy, None, states, bank, scene_idx, agent_idx, params, cfg, n)
            return jnp.sum(final.t) + jnp.sum(out.reward) + jnp.sum(out.collided)
    else:
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
        controlled_agent_steps_per_s=controlled * n / best,
        object_steps_per_s=objects * n / best,
        compile_s=compile_s,
        run_s=best,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        agents=a, objects=objects, controlled_agents=controlled, max_controlled=cfg.max_controlled,
        forced_to_log=forced_to_log, road_segments=n_seg, batch=b, steps=n,
        scenes=FLAGS.scenes,
        backend=jax.default_backend(), device=str(jax.devices()[0]),
        xla_flags=os.environ.get("XLA_FLAGS", ""), jax_version=jax.__version__,
    )
    print(
        f"agents={a} road={n_seg} batch={b} steps={n} controlled={controlled}: "
        f"{result['agent_steps_per_s']:,.0f} agent-steps/s (all slots), "
        f"{result['controlled_agent_steps_per_s']:,.0f} controlled-agent-steps/s "
        f"(compile {compile_s:.1f}s, run {best:.3f}s, peak RSS {result['peak_rss_mb']:.0f} MB)"
    )
    if FLAGS.json:
        print(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
