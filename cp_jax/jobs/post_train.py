"""The post-training job behind `launch.post_train`: anchor -> rounds (or PPO updates) of one method
until the transition budget is spent, with checkpoints, per-round diagnostics and validation.

    setup = resolve(config)                # validates every field and reads the anchor; nothing else runs
    result = post_train(config, workdir)   # resumes from workdir's latest checkpoint if there is one

Methods are looked up by config.method in METHODS; every one is charged the same way (POLICY
agent-steps simulated: records, branches, re-runs, gates, PPO rollouts).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from cp_jax import parallel
from cp_jax.counterplay import loop, rewind
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.io.metrics import Progress, read_jsonl
from cp_jax.jobs import config as config_lib
from cp_jax.jobs import scenes as scenes_lib
from cp_jax.jobs.loop import SAFE_ON_RESUME, Run, plot
from cp_jax.jobs.train import check_real
from cp_jax.policy import saved
from cp_jax.rl import evaluate, opponent, ppo, shaping, spiced
from cp_jax.sim import conditions, types

BUDGET_STOPS = ("closest", "under", "over")

# The budget only decides when the rounds stop (no schedule depends on it): a run may be resumed with a
# larger one to go on, or a smaller one to stop sooner.
RESUME_SAFE = SAFE_ON_RESUME | {"budget_steps", "budget_frac", "budget_stop"}


@dataclasses.dataclass(frozen=True)
class Method:
    """A post-training method: what it reads from the config and how it starts.

    build(setup, config, bank, params, key) -> (state, step(state, bank) -> (state, diagnostics)); the
    state carries `params` and `agent_steps` (the budget spent) and is what a checkpoint holds."""

    name: str
    label: str  # as the tables print it
    build: Callable
    ppo: bool = False  # reads config.ppo (and config.shaping): a PPO-based method
    counterplay: bool = False  # reads config.counterplay
    teacher_style: str | None = None  # the style-distillation baselines: the anchor's style distilled
    grouped: bool = True  # its scenes may be split in groups over devices (bank_groups > 1)


class Setup(NamedTuple):
    method: Method
    anchor: saved.SavedPolicy
    counterplay: CounterPlayConfig | None
    ppo: ppo.PPOConfig | None
    shaping: shaping.Shaping | None
    budget: float  # post-training agent-steps
    budget_stop: str = "closest"  # when the last round runs (keep_going)
    groups: tuple[str, int] = ("counterplay", 1)  # (config section, bank_groups) that sets the scene groups
    mesh: Any = None  # the devices of config.train.devices (parallel.config_mesh)


def _round(setup: Setup, config, bank, params, key):
    anchor, mesh = setup.anchor, setup.mesh
    round_fn = loop.make_round(anchor.net, setup.counterplay, anchor.sim, params, mesh, setup.method.teacher_style)
    anchor_params = parallel.replicate(anchor.params, mesh)
    return (parallel.replicate(loop.init(anchor.params, setup.counterplay, key), mesh),
            lambda s, b: round_fn(s, anchor_params, b))


def _ppo(setup: Setup, bank, key, step):
    """(runner from the anchor, its envs split over the mesh's devices; step(state, bank) with the
    training shaping applied)."""
    runner = ppo.start(setup.anchor.net, setup.ppo, setup.anchor.sim, key, bank, setup.mesh,
                       params=setup.anchor.params)
    shape_w = parallel.replicate(setup.shaping, setup.mesh)
    return runner, lambda s, b: step(s, b, shape_w)


def _continue(setup: Setup, config, bank, params, key):
    a = setup.anchor
    return _ppo(setup, bank, key, ppo.make_update(a.net, setup.ppo, a.sim, params, mesh=setup.mesh))


def _rewind(setup: Setup, config, bank, params, key):
    a = setup.anchor
    return _ppo(setup, bank, key, rewind.make_step(a.net, setup.counterplay, setup.ppo, a.sim, params,
                                                   mesh=setup.mesh))


def _opponent(setup: Setup, config, bank, params, key):
    a = setup.anchor
    runner, step = _ppo(setup, bank, key, opponent.make_step(a.net, setup.ppo, a.sim, params,
                                                             config.opponent.pool_every, mesh=setup.mesh))
    return opponent.init(runner, config.opponent.pool_size), step


def _spiced(setup: Setup, config, bank, params, key):
    a = setup.anchor
    return _ppo(setup, bank, key, spiced.step_from_config(a.net, setup.ppo, a.sim, params, bank, config.human,
                                                          config.seed, mesh=setup.mesh))


METHODS: dict[str, Method] = {m.name: m for m in (
    # record -> failures -> backtrack -> branch -> verify -> distill (cp_jax.counterplay.loop)
    Method("counterplay", "CounterPlay", _round, counterplay=True),
    # the anchor under the aggressive / cautious style distilled into the deployment condition (no search)
    Method("aggressive_distill", "Aggressive distillation", _round, counterplay=True, teacher_style="aggressive"),
    Method("cautious_distill", "Cautious distillation", _round, counterplay=True, teacher_style="cautious"),
    # more self-play PPO from the anchor's parameters (cp_jax.rl.ppo)
    Method("ppo_continue", "PPO-Continue", _continue, ppo=True),
    # PPO whose episodes restart from backtracked states of failed episodes (counterplay/rewind.py)
    Method("ppo_rewind", "PPO-Rewind", _rewind, ppo=True, counterplay=True, grouped=False),
    # PPO with a share of agents driven by past snapshots, excluded from the loss (rl/opponent.py)
    Method("ppo_opponent", "PPO-Opponent", _opponent, ppo=True, grouped=False),
    # PPO + bc_coef x NLL of tracked log actions (human-regularised, rl/spiced.py)
    Method("spiced", "SPICED (human-regularised PPO)", _spiced, ppo=True, grouped=False),
)}


def keep_going(spent: float, rounds: int, budget: float, rule: str) -> bool:
    """Whether to run another round (or PPO update) after `rounds` of them spent `spent` agent-steps.

    A round's cost is only known once it ran, so the next one is predicted at the mean so far (a
    function of the checkpointed counters only: a resumed run stops where an uninterrupted one does).
    "over": run until the budget is reached (the last round overshoots by up to one round);
    "closest": run another round only if that ends nearer the budget than stopping now;
    "under": run another round only if it is predicted to stay within the budget.
    The first round always runs."""
    if rounds == 0 or rule == "over":
        return spent < budget
    mean = spent / rounds
    if rule == "closest":
        return spent + mean / 2 < budget
    return spent + mean <= budget


def anchor_steps(folder: str) -> float:
    """The anchor's training transitions, from the eval.json its training run wrote: the whole
    lineage's (`lineage_agent_steps`: a fine-tuned anchor counts the runs it started from) where
    recorded, else the run's own `agent_steps`."""
    path = os.path.join(folder, "eval.json")
    try:
        with open(path) as f:
            ev = json.load(f)
        return float(ev.get("lineage_agent_steps", ev["agent_steps"]))
    except FileNotFoundError:
        raise ValueError(f"{path}: missing; set config.budget_steps (absolute) instead of config.budget_frac") from None
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: no readable 'agent_steps' ({e})") from None


def resolve(config) -> Setup:
    """Validate the experiment and read the anchor; raises ValueError naming the bad field."""
    if config.method not in METHODS:
        raise ValueError(f"config.method: unknown {config.method!r}; known: {list(METHODS)}")
    method = METHODS[config.method]
    if not config.anchor:
        raise ValueError("config.anchor: set it to a saved policy folder (e.g. assets/anchors/conditioned_small)")
    if config.budget_steps < 0:
        raise ValueError(f"config.budget_steps must be >= 0 (agent-steps; 0: config.budget_frac of the anchor's "
                         f"training), got {config.budget_steps}")
    try:
        anchor = saved.load(config.anchor)
    except (ValueError, OSError) as e:
        raise ValueError(f"config.anchor={config.anchor!r}: {e}") from None
    if anchor.net.cfg.lstm:
        raise ValueError(f"config.anchor={config.anchor!r}: an LSTM policy; post-training needs a feed-forward one")
    if config.budget_steps > 0:
        budget = float(config.budget_steps)
    elif 0 < config.budget_frac <= 1:
        budget = config.budget_frac * anchor_steps(config.anchor)
    else:
        raise ValueError(f"config.budget_frac must be in (0, 1] (or set config.budget_steps), got {config.budget_frac}")
    if config.budget_stop not in BUDGET_STOPS:
        raise ValueError(f"config.budget_stop: unknown {config.budget_stop!r}; known: {list(BUDGET_STOPS)}")
    cp_cfg = ppo_cfg = shape = None
    if method.ppo:
        if not anchor.net.cfg.condition and config.ppo.conditioned:
            raise ValueError("config.ppo.conditioned: the anchor is not conditioned")
        ppo_cfg = config_lib.build(ppo.PPOConfig, config.ppo, "ppo")
        ppo_cfg.validate(anchor.sim)
        shape = shaping.from_config(config.get("shaping", {}), ppo_cfg.conditioned)
        if (method.name == "ppo_opponent") != (ppo_cfg.opponent_frac > 0):
            raise ValueError("config.ppo.opponent_frac: > 0 for ppo_opponent (and only for it)")
        if method.name == "ppo_opponent" and (config.opponent.pool_size < 1 or config.opponent.pool_every < 1):
            raise ValueError("config.opponent.pool_size and pool_every must be >= 1")
        if (method.name == "spiced") != (ppo_cfg.bc_coef > 0):
            raise ValueError("config.ppo.bc_coef: > 0 for spiced (and only for it)")
        if method.name == "spiced":
            spiced.check_config(config.human)
    if method.counterplay:
        cp_cfg = config_lib.build(CounterPlayConfig, config.counterplay, "counterplay")
    groups = ("ppo", ppo_cfg.bank_groups) if method.ppo else ("counterplay", cp_cfg.bank_groups)
    if not method.grouped:
        for section, cfg in (("ppo", ppo_cfg), ("counterplay", cp_cfg)):
            if cfg is not None and cfg.bank_groups != 1:
                raise ValueError(f"config.{section}.bank_groups: {method.name} keeps the whole bank on every device "
                                 "(use 1; scene groups work for counterplay, the style distillations and ppo_continue)")
    conditions.style(config.eval.style)
    config_lib.positive(config.train, ("log_every", "ckpt_every", "keep"), "train")
    mesh = parallel.config_mesh(config.train.get("devices", 0))
    if method.ppo:
        parallel.check_divisible(ppo_cfg.num_envs, mesh, "config.ppo.num_envs")
    else:
        parallel.check_divisible(cp_cfg.num_envs, mesh, "config.counterplay.num_envs")
        if method.teacher_style is None:
            parallel.check_divisible(cp_cfg.max_failures, mesh, "config.counterplay.max_failures")
    scenes_lib.check(config.scenes)
    scenes_lib.check_groups(groups[1], mesh, config.scenes.train, f"config.{groups[0]}.bank_groups")
    check_real(config.scenes, anchor.sim)  # a damaged real-scene cache is refused before any work
    return Setup(method, anchor, cp_cfg, ppo_cfg, shape, budget, config.budget_stop, groups, mesh)


def _flat(diag: dict[str, Any], styles: tuple[str, ...]) -> dict[str, float]:
    """Per-round diagnostics as scalars; per-style arrays [R] become KEY_<style>."""
    out = {}
    for k, v in jax.device_get(diag).items():
        v = np.asarray(v)
        if v.ndim == 0:
            out[k] = float(v)
        else:
            out.update({f"{k.removesuffix('_style')}_{s}": float(x) for s, x in zip(styles, v, strict=True)})
    return out


def post_train(config, workdir: str) -> dict[str, Any]:
    """Post-train the anchor per config in workdir; the result goes to workdir/policy (cp_jax.policy.saved).
    Returns {"method", "rounds", "agent_steps", "budget", "final_eval", "params"}."""
    setup = resolve(config)
    anchor, sim = setup.anchor, setup.anchor.sim
    section, groups = setup.groups
    run = Run(workdir, config, keep=config.train.keep, eval_key="round", safe=RESUME_SAFE)
    params = types.default_params()
    # Data parallelism: envs / records / failures split over the devices (one device: the same program);
    # with scene groups every process reads only its devices' groups and each device holds its own.
    bank, val_bank, _ = scenes_lib.placed(config.scenes, sim, setup.mesh, groups, f"config.{section}.bank_groups")
    state, step = setup.method.build(setup, config, bank, params, jax.random.PRNGKey(config.seed))
    styles = setup.counterplay.styles if setup.counterplay is not None and not setup.method.ppo else ()
    state, done = run.restore(state)
    deploy = conditions.style(config.eval.style)

    def validate(step_done: int) -> dict[str, float]:
        res = evaluate.summarise(evaluate.evaluate(anchor.net, parallel.local(state.params), val_bank, deploy,
                                                   params, sim, jax.random.PRNGKey(config.seed)))
        run.append_eval(step_done, dict(agent_steps=float(state.agent_steps), **res))
        return res

    if val_bank is not None and done == 0:
        validate(0)
    bar = Progress(int(setup.budget), "post-training", initial=int(state.agent_steps),
                   disable=not config.train.progress)
    more = lambda s, d: keep_going(float(s.agent_steps), d, setup.budget, setup.budget_stop)  # noqa: E731
    spent = dict(before=float(state.agent_steps))

    def after(done: int, new, diag, last: bool) -> None:
        nonlocal state
        state = new
        row = _flat(diag, styles)
        row["agent_steps"] = float(new.agent_steps)
        if done % config.train.log_every == 0:
            run.writer.write(done, row)
        if val_bank is not None and (done % config.eval.every == 0 or last):
            bar.update(0, {"val_goal": validate(done)["goal"]})
        bar.update(int(row["agent_steps"] - spent["before"]))
        spent["before"] = row["agent_steps"]

    state, done = run.iterate(state, lambda s: step(s, bank), done, more, after, config.train.ckpt_every)
    bar.close()
    final = {}
    if val_bank is not None:  # the last validation (the run's final round always validates)
        final = read_jsonl(run.path("eval.jsonl"))[-1] if run.primary else dict(round=done, **validate(done))
    summary = dict(method=setup.method.name, rounds=done, agent_steps=float(state.agent_steps), budget=setup.budget,
                   final_eval=final)
    if run.primary:
        saved.save(run.path("policy"), anchor.net.cfg, parallel.local(state.params), sim)
        with open(run.path("post_train.json"), "w") as f:
            json.dump(summary, f, indent=2)
        from cp_jax.io import plots

        plot(plots.post_training, workdir, run.path("diagnostics.png"))
    run.close()
    return dict(summary, params=state.params)


def describe(setup: Setup) -> str:
    """One line: method, budget, sizes."""
    what = dataclasses.asdict(setup.counterplay) if setup.counterplay else dataclasses.asdict(setup.ppo)
    return f"{setup.method.name}: budget {setup.budget:,.0f} agent-steps; " + json.dumps(what)
