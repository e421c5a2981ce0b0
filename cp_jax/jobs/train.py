"""The self-play training job behind `launch.train_anchor`: config -> scenes -> PPO updates, with
checkpoints, metric logs, held-out evaluation and a learning-curve PNG.

    setup = resolve(config)          # validates every field; nothing else happens
    result = train(config, workdir)  # resumes from workdir's latest checkpoint if there is one
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import struct

from cp_jax import parallel
from cp_jax.io import run_info
from cp_jax.io.metrics import Progress
from cp_jax.jobs import config as config_lib
from cp_jax.jobs import scenes as scenes_lib
from cp_jax.jobs.loop import Run, plot
from cp_jax.policy import networks, saved
from cp_jax.rl import evaluate, ppo, shaping, spiced
from cp_jax.sim import conditions, types

EPISODE_KEYS = ("goal_rate", "collision_rate", "offroad_rate", "timeout_rate", "episode_return")


class Setup(NamedTuple):
    sim: types.SimConfig
    ppo: ppo.PPOConfig
    net: networks.NetConfig
    shaping: shaping.Shaping
    mesh: Any = None  # the devices of config.train.devices (parallel.config_mesh)
    start: saved.SavedPolicy | None = None  # config.init_from's policy, read and checked


def check_real(sc, sim: types.SimConfig) -> None:
    """A config's real-scene cache (config.scenes.real, if set) opens, its first and last scenes read and its
    sizes fit `sim`; raises ValueError naming the field and the damaged file before any work."""
    if not sc.get("real", ""):
        return
    from cp_jax.scenarios import cache as cache_lib  # tensorflow-datasets: only with a real-scene cache

    where = f"config.scenes.real={sc.real!r}"
    try:
        real = cache_lib.ScenarioCache(sc.real)
        if not len(real):
            raise ValueError("holds no scene")
        real[len(real) - 1]
        cache_lib.bank_for(real.cfg, real[0][1], sim, where)  # its sizes, as scenes.load checks them
    except (ValueError, OSError) as e:  # cache.ScenarioCache names a damaged file in a ValueError
        message = " ".join(str(e).split())
        raise ValueError(message if message.startswith(where) else f"{where}: {message or type(e).__name__}") from e


def check_start(path: str, net: networks.NetConfig, sim: types.SimConfig) -> saved.SavedPolicy:
    """config.init_from's saved policy, read (cp_jax.policy.saved.load: files, finite parameters) and checked
    to have config.net's network and parameter shapes under `sim`; raises ValueError naming the field."""
    where = f"config.init_from={path!r}"
    try:
        start = saved.load(path)
    except (ValueError, OSError) as e:
        raise ValueError(f"{where}: {e}") from None
    if start.net.cfg != net:
        raise ValueError(f"{where}: its network {start.net.cfg} differs from config.net {net}")
    want = jax.eval_shape(lambda: networks.init_params(net, sim, jax.random.PRNGKey(0)))
    fits = jax.tree.structure(start.params) == jax.tree.structure(want) and all(
        a.shape == b.shape for a, b in zip(jax.tree.leaves(start.params), jax.tree.leaves(want), strict=True))
    if not fits:
        diff = [f"{f.name}={getattr(start.sim, f.name)!r} (now {getattr(sim, f.name)!r})"
                for f in dataclasses.fields(sim) if getattr(start.sim, f.name) != getattr(sim, f.name)]
        raise ValueError(f"{where}: its parameters do not fit config.sim (its sim_config.json has "
                         f"{', '.join(diff[:4]) or 'the same fields'})")
    return start


def resolve(config) -> Setup:
    """Static configs from an experiment ConfigDict (and config.init_from's policy, read); raises ValueError
    naming the bad field or file."""
    sim = types.SimConfig(**config_lib.fields(types.SimConfig, config.sim, "sim"))
    net = config_lib.network(config.net, **({} if config.ppo.conditioned else {"condition": False}))
    if "total_updates" in config.ppo:
        raise ValueError("config.ppo.total_updates: set config.train.total_updates (it also sets the schedule)")
    ppo_cfg = ppo.PPOConfig(**config_lib.fields(ppo.PPOConfig, config.ppo, "ppo"),
                            total_updates=config.train.total_updates)
    ppo_cfg.validate(sim)
    shape = shaping.from_config(config.get("shaping", {}), ppo_cfg.conditioned)
    for style in config.train.eval_styles:
        conditions.style(style)
    config_lib.positive(config.train, ("log_every", "ckpt_every", "keep", "total_updates"), "train")
    mesh = parallel.config_mesh(config.train.get("devices", 0))
    parallel.check_divisible(ppo_cfg.num_envs, mesh, "config.ppo.num_envs")
    scenes_lib.check(config.scenes, streams=True)
    scenes_lib.check_groups(ppo_cfg.bank_groups, mesh, config.scenes.train, "config.ppo.bank_groups")
    if ppo_cfg.bc_coef > 0.0:  # human-regularised (HR-PPO / SPICED-style) training: logged actions of the train bank
        if ppo_cfg.bank_groups > 1 or config.scenes.get("stream", ""):
            raise ValueError("config.ppo.bc_coef > 0 needs config.ppo.bank_groups = 1 and no config.scenes.stream "
                             "(the logged batch is drawn from one fixed training bank)")
        spiced.check_config(config.get("human"))
    check_real(config.scenes, sim)
    start = check_start(config.init_from, net, sim) if config.get("init_from") else None
    return Setup(sim, ppo_cfg, net, shape, mesh, start)


@struct.dataclass
class Streaming:
    """A streaming run's checkpointed state (config.scenes.stream): the PPO runner and the bank stream's
    iterator state (grain's next_index: the bank after the one in use)."""

    runner: ppo.Runner
    next_bank: np.ndarray  # [] int32

    @property
    def params(self):
        return self.runner.params


def evaluate_styles(net, params, bank, styles, sim, seed: int) -> dict[str, dict[str, float]]:
    """Greedy self-play on the held-out bank under each named style: outcome rates and mean speed."""
    return {name: evaluate.summarise(evaluate.evaluate(net, params, bank, conditions.style(name),
                                                       types.default_params(), sim, jax.random.PRNGKey(seed)))
            for name in styles}


def train(config, workdir: str) -> dict[str, Any]:
    """Train (or resume) per config in workdir; the final policy goes to workdir/policy (cp_jax.policy.saved).
    Returns {"updates", "final_eval", "params", "runner"}."""
    setup = resolve(config)
    run = Run(workdir, config, keep=config.train.keep, eval_key="update")
    mesh, groups = setup.mesh, setup.ppo.bank_groups
    stream = None
    if config.scenes.get("stream", ""):
        stream, eval_bank = scenes_lib.streamed(config.scenes, setup.sim, mesh, groups, config.seed)
        banks = stream.iterator()
        train_bank = scenes_lib.place(next(banks)[1], mesh, groups)
    else:
        train_bank, eval_bank, _ = scenes_lib.placed(config.scenes, setup.sim, mesh, groups, "config.ppo.bank_groups")

    net = networks.ActorCritic(setup.net)
    params = types.default_params()
    start_params, ancestors = None, []
    if setup.start is not None:  # start from a saved policy's parameters (fresh optimiser)
        start_params = setup.start.params
        ancestors = run_info.lineage(config.init_from)  # eval.json records the whole lineage's transitions
    runner = ppo.start(net, setup.ppo, setup.sim, jax.random.PRNGKey(config.seed), train_bank, mesh,
                       params=start_params)
    state = runner if stream is None else Streaming(runner, np.asarray(1, np.int32))
    state, done = run.restore(state)
    if stream is not None and int(state.next_bank) != 1:  # resumed: the bank the run was on
        banks = stream.iterator(start=int(state.next_bank) - 1)
        train_bank = scenes_lib.place(next(banks)[1], mesh, groups)
    runner = state if stream is None else state.runner
    shape_w = parallel.replicate(setup.shaping, mesh)

    if setup.ppo.bc_coef > 0.0:  # + bc_coef x NLL of the bank's logged (tracked) actions, normal style
        update = spiced.step_from_config(net, setup.ppo, setup.sim, params, train_bank, config.human, config.seed,
                                         mesh=mesh)
    else:
        update = ppo.make_update(net, setup.ppo, setup.sim, params, mesh=mesh)
    total = config.train.total_updates
    bar = Progress(total, "training", initial=done, disable=not config.train.progress, unit="updates")
    log = dict(t=time.perf_counter(), steps=float(runner.agent_steps), pending=[])

    def after(done: int, state, stats, last: bool) -> None:
        runner = state if stream is None else state.runner
        log["pending"].append(stats)
        if done % config.train.log_every == 0 or last:
            now, steps = time.perf_counter(), float(runner.agent_steps)
            row = _summarise(jax.device_get(log["pending"]))
            row["agent_steps"] = steps
            row["agent_steps_per_s"] = (steps - log["steps"]) / max(now - log["t"], 1e-9)
            run.writer.write(done, row)
            bar.update(len(log["pending"]), {"sps": row["agent_steps_per_s"], "goal": row.get("goal_rate", np.nan)})
            log.update(t=now, steps=steps, pending=[])
        if eval_bank is not None and config.train.eval_every and done % config.train.eval_every == 0 and not last:
            res = evaluate_styles(net, parallel.local(runner.params), eval_bank, ("normal",), setup.sim, config.seed)
            run.append_eval(done, dict(agent_steps=float(runner.agent_steps), styles=res))

    if stream is None:
        runner, _ = run.iterate(state, lambda r: update(r, train_bank, shape_w), done, lambda _, d: d < total, after,
                                config.train.ckpt_every)
    else:  # every refresh_every updates the next bank of the stream, every env on a scene of it
        redraw, now = ppo.make_redraw(net, setup.ppo, setup.sim, mesh=mesh), dict(done=done, bank=train_bank)

        def step(state: Streaming):
            if now["done"] and now["done"] % config.scenes.refresh_every == 0:
                now["bank"] = scenes_lib.place(next(banks)[1], mesh, groups)
                state = Streaming(redraw(state.runner, now["bank"]), np.asarray(state.next_bank + 1, np.int32))
            runner, stats = update(state.runner, now["bank"], shape_w)
            now["done"] += 1
            return state.replace(runner=runner), stats

        state, _ = run.iterate(state, step, done, lambda _, d: d < total, after, config.train.ckpt_every)
        runner = state.runner
    bar.close()

    final = {}
    if eval_bank is not None:
        final = evaluate_styles(net, parallel.local(runner.params), eval_bank, config.train.eval_styles, setup.sim,
                                config.seed)
    if run.primary and eval_bank is not None:
        run.append_eval(total, dict(agent_steps=float(runner.agent_steps), styles=final))
        own = dict(run=workdir, command=list(sys.argv), git_revision=run_info.git_revision(), updates=total,
                   agent_steps=float(runner.agent_steps))
        runs = [own] + ancestors
        with open(run.path("eval.json"), "w") as f:
            json.dump(dict(updates=total, agent_steps=own["agent_steps"], styles=final, lineage=runs,
                           lineage_agent_steps=run_info.lineage_agent_steps(runs)), f, indent=2)
    if run.primary:
        saved.save(run.path("policy"), setup.net, parallel.local(runner.params), setup.sim)
        from cp_jax.io import plots

        plot(plots.learning_curve, workdir, run.path("curve.png"))
    run.close()
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
