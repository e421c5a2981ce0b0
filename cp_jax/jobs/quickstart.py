"""The quickstart job behind `launch.quickstart`: procedural scenes, non-learned controllers, metrics, PNGs.

    results = run(config, out)    # config: experiments/quickstart.py

Generates a bank of procedural scenes (every layout kind), runs one batched, compiled episode per
scene and controller (log replay, IDM, constant velocity, random policy actions), prints the outcome
rates of the eligible agents (and the shipped anchor's, greedy, if config.anchor names one), and
writes metrics.json, run_info.json (resolved config, git revision) and one PNG per scene (IDM paths), into
OUT.partial moved to OUT when complete: an OUT that holds files (or is a file) is refused unless overwrite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.io import files
from cp_jax.io.run_info import write_run_info
from cp_jax.scenarios import bank as bank_lib
from cp_jax.scenarios import render
from cp_jax.sim import conditions, env, metrics, types

CONTROLLERS = {"log": types.LOG, "idm": types.IDM, "const_vel": types.CONST_VEL, "policy": types.POLICY}
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def resolve(config):
    """Validate the experiment before any work and read config.anchor's policy (None when it is empty);
    raises ValueError naming the field."""
    unknown = set(config.controllers) - set(CONTROLLERS)
    if unknown:
        raise ValueError(f"config.controllers: unknown {sorted(unknown)}; known: {sorted(CONTROLLERS)}")
    for field, what in (("scenes", "procedural scenes"), ("agents", "agents placed per scene")):
        value = config[field]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.{field} must be an int >= 1 ({what}), got {value!r}")
    conditions.style(config.style)
    types.SimConfig(**config.sim.to_dict())  # a bad sim field fails here, before scene generation
    if not config.anchor:
        return None
    from cp_jax.policy import saved

    anchor = os.path.join(ROOT, config.anchor)
    if not os.path.isdir(anchor):
        raise ValueError(f"config.anchor={config.anchor!r}: no such folder (a saved policy, e.g. "
                         "assets/anchors/conditioned_small; --config.anchor= to skip it)")
    try:
        return saved.load(anchor)
    except (ValueError, OSError) as e:
        raise ValueError(f"config.anchor={config.anchor!r}: {e}") from None


def check_out(out: str, overwrite: bool = False) -> None:
    """Refuse an --out that is a file or holds files (an earlier quickstart's PNGs would mix with this one's)
    unless overwrite; raises ValueError naming the flag."""
    if os.path.exists(out) and not os.path.isdir(out) and not overwrite:
        raise ValueError(f"--out={out}: a file, not a folder; pass --overwrite to replace it, or choose another --out")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise ValueError(f"--out={out} holds files ({', '.join(sorted(os.listdir(out))[:4])}...); pass --overwrite "
                         "to replace the folder, or choose another --out")


def run(config, out: str, overwrite: bool = False) -> dict:
    """The whole job (module docstring); returns what metrics.json holds. Written to OUT.partial and moved
    into place when complete (check_out: an existing --out is replaced only with overwrite)."""
    pol = resolve(config)
    check_out(out, overwrite)
    dest, out = os.path.normpath(out), os.path.normpath(out) + ".partial"
    files.remove(out)
    cond = conditions.style(config.style)
    write_run_info(out, config)
    t0 = time.perf_counter()
    raws = bank_lib.procedural_scenes(config.scenes, config.seed, config.agents)
    if not raws:
        raise ValueError(f"config.scenes={config.scenes}: no procedural scene generated")
    cfg = types.SimConfig(max_agents=max(16, max(r.num_objects for r in raws)), **config.sim.to_dict())
    bank = bank_lib.make_bank(raws, cfg)
    print(f"{len(raws)} procedural scenes in {time.perf_counter() - t0:.1f}s "
          f"({sum(int(r.controllable.sum()) for r in raws)} controllable agents)")
    params = types.default_params()
    n = len(raws)
    keys = jax.random.split(jax.random.PRNGKey(config.seed), n)

    def random_actions(p, obs, s, k):
        return jax.random.randint(k, (cfg.max_agents,), 0, 91)

    @jax.jit
    def episode(controller_id):
        def one(scenario, key):
            s0 = env.reset(scenario, key, cond, cfg, jnp.full((cfg.max_agents,), controller_id, jnp.int32))
            eligible = env.default_controllers(scenario, s0.cond) == types.POLICY
            final, traj = env.rollout(random_actions, None, s0, scenario, params, cfg, cfg.episode_steps,
                                      keep_states=True)
            ret = jnp.sum(jnp.where(eligible, traj.out.reward.sum(0), 0.0))
            return final, eligible, ret, traj.state.xy
        return jax.vmap(one)(bank, keys)

    os.makedirs(out, exist_ok=True)
    results, paths, paths_of = {}, None, ""
    print(f"{'controller':>10} | goal   collision offroad timeout | return/agent | agent-steps/s")
    for name in config.controllers:
        jax.block_until_ready(episode(jnp.asarray(CONTROLLERS[name])))  # compiled first, timed second
        t1 = time.perf_counter()
        final, eligible, ret, xy = jax.block_until_ready(episode(jnp.asarray(CONTROLLERS[name])))
        dt = time.perf_counter() - t1
        r = {k: float(v) for k, v in metrics.rates(final, eligible).items()}
        r["return_per_agent"] = float(ret.sum() / max(int(eligible.sum()), 1))
        r["agent_steps_per_s"] = n * cfg.max_agents * cfg.episode_steps / dt
        results[name] = r
        print(f"{name:>10} | {r['goal']:.3f}  {r['collision']:.3f}     {r['offroad']:.3f}   {r['timeout']:.3f}   |"
              f" {r['return_per_agent']:+.3f}       | {r['agent_steps_per_s']:,.0f}")
        if name == "idm" or paths is None:
            paths, paths_of = np.asarray(xy), name

    if pol is not None:  # the shipped anchor policy, greedy, same scenes
        from cp_jax.rl import evaluate

        acfg = dataclasses.replace(cfg, obs_road=pol.sim.obs_road, obs_partners=pol.sim.obs_partners,
                                   partner_radius=pol.sim.partner_radius)
        t1 = time.perf_counter()
        rates = evaluate.summarise(evaluate.evaluate(pol.net, pol.params, bank_lib.make_bank(raws, acfg), cond, params,
                                                     acfg, jax.random.PRNGKey(config.seed)))
        results["anchor"] = dict(rates, path=config.anchor)
        print(f"{'anchor':>10} | {rates['goal']:.3f}  {rates['collision']:.3f}     {rates['offroad']:.3f}   "
              f"{rates['timeout']:.3f}   | ({config.anchor}, greedy, {time.perf_counter() - t1:.1f}s incl. compile)")

    for i, raw in enumerate(raws):
        render.render(jax.tree.map(lambda x, i=i: x[i], bank), os.path.join(out, f"scene_{i:02d}_{raw.name}.png"),
                      paths=np.moveaxis(paths[i], 0, 1), title=f"{raw.name}: {paths_of} paths, goals (stars)")
    summary = dict(scenes=[r.name for r in raws], style=config.style, sim_config=cfg.__dict__,
                   controllers=results, eligible_agents=int(eligible.sum()))
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    files.move_into_place(out, dest)  # the replaced folder (or file) stays whole until the new one is in place
    print(f"wrote {dest}/metrics.json and {n} PNGs in {time.perf_counter() - t0:.1f}s")
    return summary

