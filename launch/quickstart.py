"""The main job on the embedded default: procedural scenes, non-learned controllers, metrics, PNGs.

    python -m launch.quickstart --out=runs/quickstart [--config=experiments/quickstart.py --config.scenes=28]

Generates a bank of procedural scenes (every layout kind), runs one batched, compiled episode per
scene and controller (log replay, IDM, constant velocity, random policy actions), prints the
outcome rates of the eligible agents, and writes metrics.json, run_info.json (resolved config, git
revision) and one PNG per scene (IDM paths).
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags
from ml_collections import config_flags

flags.DEFINE_string("out", "runs/quickstart", "output directory")
config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "quickstart.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from cp_jax.io.run_info import write_run_info
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.scenarios import render
    from cp_jax.sim import conditions, env, metrics, types

    config = FLAGS.config
    ids = {"log": types.LOG, "idm": types.IDM, "const_vel": types.CONST_VEL, "policy": types.POLICY}
    unknown = set(config.controllers) - set(ids)
    if unknown:  # validate before any work
        raise ValueError(f"config.controllers: unknown {sorted(unknown)}; known: {sorted(ids)}")
    cond = conditions.style(config.style)
    types.SimConfig(**config.sim.to_dict())  # a bad sim field fails here, before scene generation
    write_run_info(FLAGS.out, config)
    t0 = time.perf_counter()
    raws = bank_lib.procedural_scenes(config.scenes, config.seed, config.agents)
    max_objects = max(r.num_objects for r in raws)
    cfg = types.SimConfig(max_agents=max(16, max_objects), **config.sim.to_dict())
    bank = bank_lib.make_bank(raws, cfg)
    print(f"{len(raws)} procedural scenes in {time.perf_counter() - t0:.1f}s "
          f"({sum(int(r.controllable.sum()) for r in raws)} controllable agents)")

    params = types.default_params()
    n = len(raws)
    keys = jax.random.split(jax.random.PRNGKey(config.seed), n)

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

    os.makedirs(FLAGS.out, exist_ok=True)
    ids = {"log": types.LOG, "idm": types.IDM, "const_vel": types.CONST_VEL, "policy": types.POLICY}
    results, idm_paths = {}, None
    print(f"{'controller':>10} | goal   collision offroad timeout | return/agent | agent-steps/s")
    unknown = set(config.controllers) - set(ids)
    if unknown:
        raise ValueError(f"config.controllers: unknown {sorted(unknown)}; known: {sorted(ids)}")
    for name in config.controllers:
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
        if name == "idm" or idm_paths is None:
            idm_paths, paths_of = np.asarray(xy), name

    anchor = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", config.anchor) if config.anchor else ""
    if anchor and os.path.exists(anchor):  # the shipped anchor policy, greedy, same scenes
        import dataclasses

        from cp_jax.policy import saved
        from cp_jax.rl import evaluate

        pol = saved.load(anchor)
        acfg = dataclasses.replace(cfg, obs_road=pol.sim.obs_road, obs_partners=pol.sim.obs_partners,
                                   partner_radius=pol.sim.partner_radius)
        abank = bank_lib.make_bank(raws, acfg)
        t1 = time.perf_counter()
        key = jax.random.PRNGKey(config.seed)
        rates = evaluate.summarise(evaluate.evaluate(pol.net, pol.params, abank, cond, params, acfg, key))
        results["anchor"] = dict(rates, path=config.anchor)
        print(f"{'anchor':>10} | {rates['goal']:.3f}  {rates['collision']:.3f}     {rates['offroad']:.3f}   "
              f"{rates['timeout']:.3f}   | ({config.anchor}, greedy, {time.perf_counter() - t1:.1f}s incl. compile)")

    for i, raw in enumerate(raws):
        scenario = jax.tree.map(lambda x, i=i: x[i], bank)
        paths = np.moveaxis(idm_paths[i], 0, 1)
        render.render(scenario, os.path.join(FLAGS.out, f"scene_{i:02d}_{raw.name}.png"),
                      paths=paths, title=f"{raw.name}: {paths_of} paths, goals (stars)")
    summary = dict(scenes=[r.name for r in raws], style=config.style, sim_config=cfg.__dict__,
                   controllers=results, eligible_agents=int(eligible.sum()))
    with open(os.path.join(FLAGS.out, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {FLAGS.out}/metrics.json and {n} PNGs in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    app.run(main)
