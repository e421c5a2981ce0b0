"""The training driver behind `launch.train_anchor`: config -> scenes -> PPO updates, with
checkpoints, metric logs, held-out evaluation and a learning-curve PNG.

    setup = resolve(config)          # validates every field; nothing else happens
    result = train(config, workdir)  # resumes from workdir's latest checkpoint if there is one
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import serialization

from cp_jax import parallel
from cp_jax.io.checkpoints import Checkpointer
from cp_jax.io.metrics import MetricWriter, Progress, truncate_jsonl
from cp_jax.io import run_info
from cp_jax.io.run_info import write_run_info
from cp_jax.policy import networks, saved
from cp_jax.rl import ppo, spiced
from cp_jax.sim import conditions, types

FAULT_ENV = "CP_JAX_FAULT_KILL_AT_UPDATE"  # tests only: SIGKILL this process right after that update
EPISODE_KEYS = ("goal_rate", "collision_rate", "offroad_rate", "timeout_rate", "episode_return")


class Setup(NamedTuple):
    sim: types.SimConfig
    ppo: ppo.PPOConfig
    net: networks.NetConfig
    mesh: Any = None  # the devices of config.train.devices (parallel.config_mesh)


def config_fields(cls, section, name: str) -> dict[str, Any]:
    """A config section as keyword arguments of a dataclass; unknown keys raise, naming them."""
    values = section.to_dict() if hasattr(section, "to_dict") else dict(section)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"config.{name}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def resolve(config) -> Setup:
    """Static configs from an experiment ConfigDict; raises ValueError naming the bad field."""
    sim = types.SimConfig(**config_fields(types.SimConfig, config.sim, "sim"))
    presets = networks.PRESETS
    if config.net.preset not in presets:
        raise ValueError(f"config.net.preset: unknown {config.net.preset!r}; known: {sorted(presets)}")
    net = dataclasses.replace(presets[config.net.preset](),
                              **config_fields(networks.NetConfig, config.net.overrides, "net.overrides"))
    if not config.ppo.conditioned:
        net = dataclasses.replace(net, condition=False)
    net.validate()
    if "total_updates" in config.ppo:
        raise ValueError("config.ppo.total_updates: set config.train.total_updates (it also sets the schedule)")
    ppo_cfg = ppo.PPOConfig(**config_fields(ppo.PPOConfig, config.ppo, "ppo"), total_updates=config.train.total_updates)
    ppo_cfg.validate(sim)
    for style in config.train.eval_styles:
        conditions.style(style)
    for name in ("log_every", "ckpt_every", "keep", "total_updates"):
        if config.train[name] < 1:
            raise ValueError(f"config.train.{name} must be >= 1, got {config.train[name]}")
    mesh = parallel.config_mesh(config.train.get("devices", 0))
    parallel.check_divisible(ppo_cfg.num_envs, mesh, "config.ppo.num_envs")
    if config.scenes.train < 1 or config.scenes.eval < 0:
        raise ValueError("config.scenes.train must be >= 1 and config.scenes.eval >= 0")
    check_groups(ppo_cfg.bank_groups, mesh, config.scenes.train, "config.ppo.bank_groups")
    if ppo_cfg.bc_coef > 0.0:  # human-regularised (HR-PPO / SPICED-style) training: logged actions of the train bank
        if ppo_cfg.bank_groups > 1:
            raise ValueError("config.ppo.bc_coef > 0 needs config.ppo.bank_groups = 1 (the logged batch is drawn "
                             "from the whole training bank)")
        spiced.check_config(config.get("human"))
    if config.scenes.eval and abs(config.scenes.eval_seed - config.scenes.train_seed) < config.scenes.train:
        raise ValueError("config.scenes.eval_seed: held-out seeds overlap the training seeds")
    if config.scenes.real and not os.path.exists(os.path.join(config.scenes.real, "sim_config.json")):
        raise ValueError(f"config.scenes.real={config.scenes.real!r}: not a scenario cache (no sim_config.json)")
    return Setup(sim, ppo_cfg, net, mesh)


def check_groups(num_groups: int, mesh, train_scenes: int, field: str) -> None:
    """Scene groups (bank_groups > 1) must split evenly over the devices and the training scenes."""
    if num_groups == 1:
        return
    if num_groups % parallel.size(mesh):
        raise ValueError(f"{field} ({num_groups}) must be a multiple of the number of devices ({parallel.size(mesh)})")
    if train_scenes % num_groups:
        raise ValueError(f"config.scenes.train ({train_scenes}) must be a multiple of {field} ({num_groups})")


def load_scenes(sc, sim: types.SimConfig, groups: list[int] | None = None, num_groups: int = 1,
                field: str = "config.ppo.bank_groups"):
    """(train bank, held-out bank or None, scene names) for a config's scenes section sc. groups: read
    only those of num_groups scene groups (group g: procedural seeds train_seed + g n .. + (g + 1) n - 1
    with n = train / num_groups, then its share of the real scenes) and return the bank grouped
    [len(groups), scenes per group, ...]; field names the setting in errors."""
    from cp_jax.scenarios import bank as bank_lib

    real = None
    if sc.get("real", ""):
        from cp_jax.scenarios import cache as cache_lib

        real = cache_lib.ScenarioCache(sc.real)
        cache_lib.bank_for(real.cfg, real[0][1], sim, f"config.scenes.real={sc.real!r}")  # sizes checked up front
    eval_bank = None
    if sc.eval:
        _, eval_bank = bank_lib.cached_procedural_bank(sc.cache_dir, sc.eval, sc.eval_seed, sc.agents, sim)
    if groups is None:  # one group holding every scene, unstacked and device-resident
        names, bank = _scene_group(sc, sim, real, 0, sc.train, len(real) if real is not None else 0)
        return jax.tree.map(jnp.asarray, bank), eval_bank, names
    if not groups:
        raise ValueError(f"{field} ({num_groups}): none of this process's devices is in the mesh "
                         "(config.train.devices); every process must hold some scene groups")
    n, r = sc.train // num_groups, (len(real) // num_groups if real is not None else 0)
    if real is not None and r == 0:
        raise ValueError(f"config.scenes.real={sc.real!r}: {len(real)} scenes cannot fill "
                         f"{field} ({num_groups}) groups")
    if real is not None and len(real) % num_groups:
        logging.warning("config.scenes.real: %d scenes in %d groups of %d; the last %d are not used", len(real),
                        num_groups, r, len(real) % num_groups)
    names, banks = [], []
    for g in groups:  # the union over g of these is exactly the ungrouped bank (same seeds, same layouts)
        group_names, bank = _scene_group(sc, sim, real, g, n, r)
        names += group_names
        banks.append(jax.tree.map(np.asarray, bank))
    # Stacked on the host: parallel.shard_groups puts each group on its own device.
    return jax.tree.map(lambda *x: np.stack(x), *banks), eval_bank, names


def _scene_group(sc, sim: types.SimConfig, real, g: int, n: int, r: int):
    """(names, bank [n + r, ...]) of scene group g: procedural seeds train_seed + g n .. + (g + 1) n - 1,
    then real scenes g r .. (g + 1) r - 1 of the cache real (None: none)."""
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.scenarios import cache as cache_lib

    names, bank = bank_lib.cached_procedural_bank(sc.cache_dir, n, sc.train_seed + g * n, sc.agents, sim, first=g * n)
    if real is not None:
        real_names, real_bank = real.load_bank(list(range(g * r, (g + 1) * r)))
        real_bank = cache_lib.bank_for(real.cfg, real_bank, sim, f"config.scenes.real={sc.real!r}")
        names = names + real_names
        bank = jax.tree.map(lambda a, b: np.concatenate([a, b]), bank, real_bank)
    return names, bank


def check_resumable(workdir: str, section: str, num_groups: int) -> None:
    """Refuse to resume checkpoints made with other scene groups (config.<section>.bank_groups): their
    scene indices would point into other groups (run_info.json of the earlier run holds its config)."""
    info, ckpts = os.path.join(workdir, "run_info.json"), os.path.join(workdir, "checkpoints")
    if not (os.path.exists(info) and os.path.isdir(ckpts) and os.listdir(ckpts)):
        return
    with open(info) as f:
        before = (json.load(f).get("config", {}).get(section) or {}).get("bank_groups", 1)
    if before != num_groups:
        raise ValueError(f"config.{section}.bank_groups ({num_groups}): {workdir} holds checkpoints of a run with "
                         f"bank_groups={before}; resume with that value or start in a new --workdir")


def evaluate_styles(net, params, bank, styles, sim, seed: int) -> dict[str, dict[str, float]]:
    """Greedy self-play on the held-out bank under each named style: outcome rates and mean speed."""
    out = {}
    for name in styles:
        out[name] = ppo.summarise(ppo.evaluate(net, params, bank, conditions.style(name), types.default_params(), sim,
                                               jax.random.PRNGKey(seed)))
    return out


def _to_tree(runner: ppo.Runner):
    return serialization.to_state_dict(runner)


def train(config, workdir: str) -> dict[str, Any]:
    """Train (or resume) per config in workdir; the final policy goes to workdir/policy (cp_jax.policy.saved).
    Returns {"updates", "final_eval", "params", "runner"}."""
    setup = resolve(config)
    check_resumable(workdir, "ppo", setup.ppo.bank_groups)
    primary = jax.process_index() == 0  # in a multi-host run only process 0 writes files (orbax: checkpoints)
    os.makedirs(workdir, exist_ok=True)
    if primary:
        write_run_info(workdir, config)
    mesh = setup.mesh  # data parallelism (one device: the same program)
    groups = setup.ppo.bank_groups
    train_bank, eval_bank, names = load_scenes(config.scenes, setup.sim, parallel.local_groups(groups, mesh)
                                               if groups > 1 else None, groups)
    logging.info("%d training scenes%s, %s held-out", len(names), f" (this process's of {groups} groups)"
                 if groups > 1 else "", 0 if eval_bank is None else config.scenes.eval)

    net = networks.ActorCritic(setup.net)
    params = types.default_params()
    key = jax.random.PRNGKey(config.seed)
    start_params = None
    if config.get("init_from"):  # start from a saved policy's parameters (fresh optimiser)
        start_policy = saved.load(config.init_from)
        if start_policy.net.cfg != setup.net:
            raise ValueError(f"config.init_from={config.init_from!r}: its network {start_policy.net.cfg} differs "
                             f"from config.net {setup.net}")
        start_params = start_policy.params
    # the runs that made the starting policy (eval.json records the whole lineage's transitions)
    ancestors = run_info.lineage(config.init_from) if config.get("init_from") else []
    # Data parallelism: the envs split over the devices; the bank whole on each, or its groups split.
    train_bank = (parallel.replicate(train_bank, mesh) if groups == 1
                  else parallel.shard_groups(train_bank, mesh, groups))
    runner = ppo.start(net, setup.ppo, setup.sim, key, train_bank, mesh, params=start_params)
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=config.train.keep)
    writer = MetricWriter(workdir, enabled=primary)
    restored = ckpt.restore(_to_tree(runner))  # onto the runner's shardings
    start = 0
    if restored is not None:
        start, tree = restored
        runner = serialization.from_state_dict(runner, tree)
        logging.info("resumed from update %d", start)
    # Logs hold exactly the steps before the restored one (none when starting afresh): a resumed
    # or re-started run writes the rest again.
    writer.truncate_after(start)
    if primary:
        truncate_jsonl(os.path.join(workdir, "eval.jsonl"), "update", start if restored is not None else -1)

    if setup.ppo.bc_coef > 0.0:  # + bc_coef x NLL of the bank's logged (tracked) actions, normal style
        update = spiced.step_from_config(net, setup.ppo, setup.sim, params, train_bank, config.human, config.seed,
                                         mesh=mesh)
    else:
        update = ppo.make_update(net, setup.ppo, setup.sim, params, mesh=mesh)
    total = config.train.total_updates
    bar = Progress(total, "updates", initial=start, disable=not config.train.progress)
    t_last, steps_last, pending = time.perf_counter(), float(runner.agent_steps), []
    for u in range(start, total):
        runner, stats = update(runner, train_bank)
        pending.append(stats)
        done = u + 1
        if done % config.train.log_every == 0 or done == total:
            host = jax.device_get(pending)
            now, steps = time.perf_counter(), float(runner.agent_steps)
            row = _summarise(host)
            row["agent_steps"] = steps
            row["agent_steps_per_s"] = (steps - steps_last) / max(now - t_last, 1e-9)
            writer.write(done, row)
            bar.update(len(pending), {"sps": row["agent_steps_per_s"], "goal": row.get("goal_rate", float("nan"))})
            t_last, steps_last, pending = now, steps, []
        if eval_bank is not None and config.train.eval_every and done % config.train.eval_every == 0 and done < total:
            res = evaluate_styles(net, parallel.local(runner.params), eval_bank, ("normal",), setup.sim, config.seed)
            if primary:
                _append_eval(workdir, done, float(runner.agent_steps), res)
        if done % config.train.ckpt_every == 0 or done == total:
            ckpt.save(done, _to_tree(runner))
        if os.environ.get(FAULT_ENV) == str(done):  # fault injection for the resume test: a real SIGKILL
            os.kill(os.getpid(), signal.SIGKILL)
    bar.close()
    writer.close()

    final = {}
    if eval_bank is not None:
        final = evaluate_styles(net, parallel.local(runner.params), eval_bank, config.train.eval_styles, setup.sim,
                                config.seed)
    if primary and eval_bank is not None:
        _append_eval(workdir, total, float(runner.agent_steps), final)
        own = dict(run=workdir, command=list(sys.argv), git_revision=run_info.git_revision(), updates=total,
                   agent_steps=float(runner.agent_steps))
        runs = [own] + ancestors
        with open(os.path.join(workdir, "eval.json"), "w") as f:
            json.dump(dict(updates=total, agent_steps=own["agent_steps"], styles=final, lineage=runs,
                           lineage_agent_steps=run_info.lineage_agent_steps(runs)), f, indent=2)
    if primary:
        saved.save(os.path.join(workdir, "policy"), setup.net, parallel.local(runner.params), setup.sim)
        try:
            from cp_jax.io import plots

            plots.learning_curve(workdir, os.path.join(workdir, "curve.png"))
        except Exception as e:  # a plot never fails a finished run
            logging.warning("curve.png not written: %s", e)
    ckpt.close()
    return dict(updates=total, final_eval=final, params=runner.params, runner=runner)


def _summarise(rows: list[dict]) -> dict[str, float]:
    """Mean of per-update stats; episode outcome rates averaged over the updates that ended episodes."""
    keys = [k for k in rows[0] if k not in EPISODE_KEYS and k != "episodes"]
    out = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    ended = [r for r in rows if r["episodes"] > 0]
    if ended:
        w = np.array([r["episodes"] for r in ended], np.float64)
        for k in EPISODE_KEYS:
            out[k] = float(np.sum(w * np.array([r[k] for r in ended])) / w.sum())
        out["episodes"] = float(w.sum())
    return out


def _append_eval(workdir: str, update: int, agent_steps: float, result: dict) -> None:
    with open(os.path.join(workdir, "eval.jsonl"), "a") as f:
        f.write(json.dumps(dict(update=update, agent_steps=agent_steps, styles=result)) + "\n")

