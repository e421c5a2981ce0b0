"""The main job on the embedded default: procedural scenes, non-learned controllers, metrics, PNGs.

    python -m launch.quickstart --out=runs/quickstart

Generates a bank of procedural scenes (every layout kind), runs one batched, compiled episode per
scene and controller (log replay, IDM, constant velocity, random policy actions), prints the
outcome rates of the eligible agents, and writes metrics.json and one PNG per scene (IDM paths).
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags

flags.DEFINE_string("out", "runs/quickstart", "output directory")
flags.DEFINE_integer("scenes", 14, "procedural scenes (cycling through all layout kinds)")
flags.DEFINE_integer("agents", 12, "agents placed per scene")
flags.DEFINE_integer("seed", 0, "first scene seed")
flags.DEFINE_string("style", "normal", "reward condition (style name) of every agent")
FLAGS = flags.FLAGS

CONTROLLERS = ("log", "idm", "const_vel", "policy")


def main(_):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.scenarios import render
    from cp_jax.sim import conditions, env, metrics, types

    os.makedirs(FLAGS.out, exist_ok=True)
    t0 = time.perf_counter()
    raws = bank_lib.procedural_scenes(FLAGS.scenes, FLAGS.seed, FLAGS.agents)
    max_objects = max(r.num_objects for r in raws)
    cfg = types.SimConfig(max_agents=max(16, max_objects), max_road_segments=2048, max_lanes=64)
    bank = bank_lib.make_bank(raws, cfg)
    print(f"{len(raws)} procedural scenes in {time.perf_counter() - t0:.1f}s "
          f"({sum(int(r.controllable.sum()) for r in raws)} controllable agents)")

    params = types.default_params()
    cond = conditions.style(FLAGS.style)
    n = len(raws)
    keys = jax.random.split(jax.random.PRNGKey(FLAGS.seed), n)

    @jax.jit
    def episode(controller_id):
        def one(scenario, key):
            ctrl = jnp.full((cfg.max_agents,), controller_id, jnp.int32)
            s0 = env.reset(scenario, key, cond, cfg, ctrl)
            eligible = env.default_controllers(scenario, s0.cond) == types.POLICY
            policy = lambda p, obs, s, k: jax.random.randint(k, (cfg.max_agents,), 0, 91)  # noqa: E731
            final, traj = env.rollout(policy, None, s0, scenario, params, cfg, cfg.episode_steps,
                                      keep_states=True)
            ret = jnp.sum(jnp.where(eligible, traj.out.reward.sum(0), 0.0))
            return final, eligible, ret, traj.state.xy
        return jax.vmap(one)(bank, keys)

    ids = {"log": types.LOG, "idm": types.IDM, "const_vel": types.CONST_VEL, "policy": types.POLICY}
    results, idm_paths = {}, None
    print(f"{'controller':>10} | goal   collision offroad timeout | return/agent | agent-steps/s")
    for name in CONTROLLERS:
        out = episode(jnp.asarray(ids[name]))
        jax.block_until_ready(out)
        t1 = time.perf_counter()
        final, eligible, ret, xy = jax.block_until_ready(episode(jnp.asarray(ids[name])))
        dt = time.perf_counter() - t1
        r = {k: float(v) for k, v in metrics.rates(final, eligible).items()}
        r["return_per_agent"] = float(ret.sum() / max(int(eligible.sum()), 1))
        r["agent_steps_per_s"] = n * cfg.max_agents * cfg.episode_steps / dt
        results[name] = r
        print(f"{name:>10} | {r['goal']:.3f}  {r['collision']:.3f}     {r['offroad']:.3f}   {r['timeout']:.3f}   |"
              f" {r['return_per_agent']:+.3f}       | {r['agent_steps_per_s']:,.0f}")
        if name == "idm":
            idm_paths = np.asarray(xy)

    for i, raw in enumerate(raws):
        scenario = jax.tree.map(lambda x, i=i: x[i], bank)
        paths = np.moveaxis(idm_paths[i], 0, 1)
        render.render(scenario, os.path.join(FLAGS.out, f"scene_{i:02d}_{raw.name}.png"),
                      paths=paths, title=f"{raw.name}: IDM paths, goals (stars)")
    summary = dict(scenes=[r.name for r in raws], style=FLAGS.style, sim_config=cfg.__dict__,
                   controllers=results, eligible_agents=int(eligible.sum()))
    with open(os.path.join(FLAGS.out, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {FLAGS.out}/metrics.json and {n} PNGs in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    app.run(main)
