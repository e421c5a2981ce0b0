"""The post-training driver behind `launch.post_train`: anchor -> rounds (or PPO updates) until the
transition budget is spent, with checkpoints, per-round diagnostics and validation.

    setup = resolve(config)            # validates every field and reads the anchor; nothing else runs
    result = post_train(config, workdir)   # resumes from workdir's latest checkpoint if there is one

Methods (config.method), every one charged the same way (POLICY agent-steps simulated):
    counterplay         record -> failures -> backtrack -> branch -> verify -> distill (cp_jax.counterplay.loop)
    aggressive_distill  the anchor under the aggressive style distilled into the deployment condition
    cautious_distill    the same with the cautious style (no search, no verification)
    ppo_continue        more self-play PPO from the anchor's parameters (cp_jax.rl.ppo)
    ppo_rewind          PPO whose episodes restart from backtracked states of failed episodes (rewind.py)
    ppo_opponent        PPO with a share of agents driven by past snapshots, excluded from the loss (rl/opponent.py)
    spiced              PPO + bc_coef x NLL of tracked log actions (human-regularised, rl/spiced.py)
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from typing import Any, NamedTuple

import jax
import numpy as np
from absl import logging
from flax import serialization

from cp_jax import parallel
from cp_jax.counterplay import loop, rewind
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.io.checkpoints import Checkpointer
from cp_jax.io.metrics import MetricWriter, Progress, read_jsonl, truncate_jsonl
from cp_jax.io.run_info import write_run_info
from cp_jax.policy import saved
from cp_jax.rl import opponent, ppo, spiced
from cp_jax.rl.trainer import check_groups, check_resumable, config_fields, load_scenes
from cp_jax.sim import conditions, types

METHODS = ("counterplay", "aggressive_distill", "cautious_distill", "ppo_continue", "ppo_rewind", "ppo_opponent",
           "spiced")
PPO_METHODS = ("ppo_continue", "ppo_rewind", "ppo_opponent", "spiced")
FAULT_ENV = "CP_JAX_FAULT_KILL_AT_ROUND"  # tests only: SIGKILL this process right after that round
BUDGET_STOPS = ("closest", "under", "over")


class Setup(NamedTuple):
    method: str
    anchor: saved.SavedPolicy
    counterplay: CounterPlayConfig | None
    ppo: ppo.PPOConfig | None
    budget: float  # post-training agent-steps
    budget_stop: str = "closest"  # when the last round runs (keep_going)
    groups: tuple[str, int] = ("counterplay", 1)  # (config section, bank_groups) that sets the scene groups
    mesh: Any = None  # the devices of config.train.devices (parallel.config_mesh)


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
    if not config.anchor:
        raise ValueError("config.anchor: set it to a saved policy folder (e.g. assets/anchors/conditioned_small)")
    anchor = saved.load(config.anchor)
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
    cp_cfg = ppo_cfg = None
    if config.method in PPO_METHODS:
        if not anchor.net.cfg.condition and config.ppo.conditioned:
            raise ValueError("config.ppo.conditioned: the anchor is not conditioned")
        ppo_cfg = ppo.PPOConfig(**config_fields(ppo.PPOConfig, config.ppo, "ppo"))
        ppo_cfg.validate(anchor.sim)
        if ppo_cfg.bank_groups != 1 and config.method != "ppo_continue":
            raise ValueError(f"config.ppo.bank_groups: {config.method} keeps the whole bank on every device (use 1; "
                             "scene groups work for counterplay, the style distillations and ppo_continue)")
        if (config.method == "ppo_opponent") != (ppo_cfg.opponent_frac > 0):
            raise ValueError("config.ppo.opponent_frac: > 0 for ppo_opponent (and only for it)")
        if config.method == "ppo_opponent" and (config.opponent.pool_size < 1 or config.opponent.pool_every < 1):
            raise ValueError("config.opponent.pool_size and pool_every must be >= 1")
        if (config.method == "spiced") != (ppo_cfg.bc_coef > 0):
            raise ValueError("config.ppo.bc_coef: > 0 for spiced (and only for it)")
        if config.method == "spiced":
            spiced.check_config(config.human)
    if config.method == "ppo_rewind" or config.method not in PPO_METHODS:
        fields = config_fields(CounterPlayConfig, config.counterplay, "counterplay")
        if config.method.endswith("_distill"):
            fields.update(method="style_distill", teacher_style=config.method.split("_")[0])
        cp_cfg = CounterPlayConfig(**fields)
        if config.method == "ppo_rewind" and cp_cfg.bank_groups != 1:
            raise ValueError("config.counterplay.bank_groups: ppo_rewind keeps the whole bank on every device (use 1)")
    groups = ("ppo", ppo_cfg.bank_groups) if config.method in PPO_METHODS else ("counterplay", cp_cfg.bank_groups)
    conditions.style(config.eval.style)
    for name in ("log_every", "ckpt_every", "keep"):
        if config.train[name] < 1:
            raise ValueError(f"config.train.{name} must be >= 1, got {config.train[name]}")
    mesh = parallel.config_mesh(config.train.get("devices", 0))
    if config.method not in PPO_METHODS:
        parallel.check_divisible(cp_cfg.num_envs, mesh, "config.counterplay.num_envs")
        if config.method == "counterplay":
            parallel.check_divisible(cp_cfg.max_failures, mesh, "config.counterplay.max_failures")
    if ppo_cfg is not None:
        parallel.check_divisible(ppo_cfg.num_envs, mesh, "config.ppo.num_envs")
    if config.scenes.train < 1 or config.scenes.eval < 0:
        raise ValueError("config.scenes.train must be >= 1 and config.scenes.eval >= 0")
    check_groups(groups[1], mesh, config.scenes.train, f"config.{groups[0]}.bank_groups")
    return Setup(config.method, anchor, cp_cfg, ppo_cfg, budget, config.budget_stop, groups, mesh)


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


def _ppo_method(setup: Setup, config, bank, params, key):
    """(initial state, step(state, bank) -> (state, stats)) of a PPO-based method, from the anchor,
    its envs split over the mesh's devices (bank: replicated, or grouped and split for bank_groups > 1)."""
    anchor, sim, cfg, mesh = setup.anchor, setup.anchor.sim, setup.ppo, setup.mesh
    runner = ppo.start(anchor.net, cfg, sim, key, bank, mesh, params=anchor.params)
    if setup.method == "ppo_continue":
        return runner, ppo.make_update(anchor.net, cfg, sim, params, mesh=mesh)
    if setup.method == "ppo_rewind":
        return runner, rewind.make_step(anchor.net, setup.counterplay, cfg, sim, params, mesh=mesh)
    if setup.method == "ppo_opponent":
        return (opponent.init(runner, config.opponent.pool_size),
                opponent.make_step(anchor.net, cfg, sim, params, config.opponent.pool_every, mesh=mesh))
    return runner, spiced.step_from_config(anchor.net, cfg, sim, params, bank, config.human, config.seed, mesh=mesh)


def post_train(config, workdir: str) -> dict[str, Any]:
    """Post-train the anchor per config in workdir; the result goes to workdir/policy (cp_jax.policy.saved).
    Returns {"rounds", "agent_steps", "final_eval", "params"}."""
    setup = resolve(config)
    anchor, sim = setup.anchor, setup.anchor.sim
    section, groups = setup.groups
    check_resumable(workdir, section, groups)
    primary = jax.process_index() == 0  # in a multi-host run only process 0 writes files (orbax: checkpoints)
    os.makedirs(workdir, exist_ok=True)
    if primary:
        write_run_info(workdir, config)
    params = types.default_params()
    key = jax.random.PRNGKey(config.seed)
    # Data parallelism: envs / records / failures split over the devices (one device: the same program);
    # with scene groups every process reads only its devices' groups and each device holds its own.
    mesh = setup.mesh
    bank, val_bank, names = load_scenes(config.scenes, sim, parallel.local_groups(groups, mesh) if groups > 1 else None,
                                        groups, f"config.{section}.bank_groups")
    logging.info("%d training scenes%s", len(names), f" (this process's of {groups} groups)" if groups > 1 else "")
    bank = parallel.replicate(bank, mesh) if groups == 1 else parallel.shard_groups(bank, mesh, groups)

    if setup.method in PPO_METHODS:
        state, update = _ppo_method(setup, config, bank, params, key)
        step_fn = lambda s: update(s, bank)  # noqa: E731
        styles: tuple[str, ...] = ()
    else:
        round_fn = loop.make_round(anchor.net, setup.counterplay, sim, params, mesh)
        state = parallel.replicate(loop.init(anchor.params, setup.counterplay, key), mesh)
        anchor_params = parallel.replicate(anchor.params, mesh)
        step_fn = lambda s: round_fn(s, anchor_params, bank)  # noqa: E731
        styles = setup.counterplay.styles

    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=config.train.keep)
    writer = MetricWriter(workdir, enabled=primary)
    restored = ckpt.restore(serialization.to_state_dict(state))
    done = 0
    if restored is not None:
        done, tree = restored
        state = serialization.from_state_dict(state, tree)
        logging.info("resumed from round %d (%.0f agent-steps)", done, float(state.agent_steps))
    # Logs hold exactly the steps before the restored one (none when starting afresh): a resumed
    # or re-started run writes the rest again.
    writer.truncate_after(done)
    if primary:
        truncate_jsonl(os.path.join(workdir, "eval.jsonl"), "round", done if restored is not None else -1)

    deploy = conditions.style(config.eval.style)

    def validate(step: int) -> dict[str, float]:
        res = ppo.summarise(ppo.evaluate(anchor.net, parallel.local(state.params), val_bank, deploy, params, sim,
                                         jax.random.PRNGKey(config.seed)))
        if primary:
            with open(os.path.join(workdir, "eval.jsonl"), "a") as f:
                f.write(json.dumps(dict(round=step, agent_steps=float(state.agent_steps), **res)) + "\n")
        return res

    if val_bank is not None and done == 0:
        validate(0)
    bar = Progress(int(setup.budget), "agent-steps", initial=int(state.agent_steps), disable=not config.train.progress)
    while keep_going(float(state.agent_steps), done, setup.budget, setup.budget_stop):
        before = float(state.agent_steps)
        state, diag = step_fn(state)
        done += 1
        row = _flat(diag, styles)
        row["agent_steps"] = float(state.agent_steps)
        if done % config.train.log_every == 0:
            writer.write(done, row)
        last = not keep_going(float(state.agent_steps), done, setup.budget, setup.budget_stop)
        if val_bank is not None and (done % config.eval.every == 0 or last):
            res = validate(done)
            bar.update(0, {"val_goal": res["goal"]})
        if done % config.train.ckpt_every == 0 or last:
            ckpt.save(done, serialization.to_state_dict(state))
        bar.update(int(float(state.agent_steps) - before))
        if os.environ.get(FAULT_ENV) == str(done):  # fault injection for the resume test: a real SIGKILL
            os.kill(os.getpid(), signal.SIGKILL)
    bar.close()
    writer.close()
    ckpt.close()
    final = {}
    if val_bank is not None:  # the last validation (the run's final round always validates)
        final = read_jsonl(os.path.join(workdir, "eval.jsonl"))[-1] if primary else dict(round=done, **validate(done))
    summary = dict(method=setup.method, rounds=done, agent_steps=float(state.agent_steps), budget=setup.budget,
                   final_eval=final)
    if primary:
        saved.save(os.path.join(workdir, "policy"), anchor.net.cfg, parallel.local(state.params), sim)
        with open(os.path.join(workdir, "post_train.json"), "w") as f:
            json.dump(summary, f, indent=2)
        try:
            from cp_jax.io import plots

            plots.post_training(workdir, os.path.join(workdir, "diagnostics.png"))
        except Exception as e:  # a plot never fails a finished run
            logging.warning("diagnostics.png not written: %s", e)
    return dict(summary, params=state.params)



def describe(setup: Setup) -> str:
    """One line: method, budget, sizes."""
    what = dataclasses.asdict(setup.counterplay) if setup.counterplay else dataclasses.asdict(setup.ppo)
    return f"{setup.method}: budget {setup.budget:,.0f} agent-steps; " + json.dumps(what)
