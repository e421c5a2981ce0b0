"""The behaviour-cloning job behind `launch.train_bc`: the "SMART stand-in (BC)" traffic policy.

    setup = resolve(config)      # every field validated; nothing else runs
    result = run(config, workdir)

The procedural banks are read or built (the anchors' cached banks) and labelled and observed
(cp_jax.rl.bc: closed-loop tracking, optional noisy recovery passes); a converted real-scene cache
(launch.build_scenes; any object / road slot counts, obs_road >= the training one; see
`real_config`) is labelled with its own sizes and its samples join the training set. The network
(the small preset without a condition branch; with net.overrides.condition=True the anchor's
conditioned network, its condition slot set to bc.style, which `launch.train_anchor
--config.init_from=WORKDIR/policy` can start from) is fitted with cross-entropy for bc.epochs epochs,
one checkpoint per epoch (a re-run resumes; labelling is deterministic and is redone). The workdir
gets run_info.json, labels.json (sample counts, label-tracking errors vs the logs), metrics.jsonl +
tb/ (loss and accuracies per epoch, train and held-out), eval.json (greedy closed-loop self-play on
the held-out scenes, every controllable agent driven by the policy) and the policy in
workdir/policy (cp_jax.policy.saved).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import struct

from cp_jax.io.metrics import Progress
from cp_jax.jobs import config as config_lib
from cp_jax.jobs import scenes as scenes_lib
from cp_jax.jobs.loop import Run
from cp_jax.jobs.train import evaluate_styles
from cp_jax.policy import networks, saved
from cp_jax.rl import bc as bc_lib
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import types


class Setup(NamedTuple):
    sim: types.SimConfig
    net: networks.NetConfig
    bc: bc_lib.BCConfig


@struct.dataclass
class State:
    """What a BC checkpoint holds."""

    params: Any
    opt_state: Any
    epoch: jax.Array  # [] int32 epochs done


def resolve(config) -> Setup:
    """Static configs from an experiment ConfigDict; raises ValueError naming the bad field."""
    sim = types.SimConfig(**config_lib.fields(types.SimConfig, config.sim, "sim"))
    if not sim.discrete_actions:
        raise ValueError("config.sim.discrete_actions must be True (labels are indices of the action grid)")
    net = config_lib.network(config.net, **({} if "condition" in config.net.overrides else {"condition": False}))
    if net.lstm:
        raise ValueError("config.net.overrides.lstm: behaviour cloning trains feed-forward networks only (lstm=0)")
    try:
        bc_cfg = bc_lib.BCConfig(**config_lib.fields(bc_lib.BCConfig, config.bc, "bc"))
    except ValueError as e:  # re-raised with the config path of the field
        raise ValueError(str(e).replace("BCConfig.", "config.bc.")) from None
    scenes_lib.check(config.scenes)
    if config.scenes.real:
        real_config(config.scenes.real, sim)  # raises naming config.scenes.real
    if not isinstance(config.train.evaluate, bool) or not isinstance(config.train.progress, bool):
        raise ValueError("config.train.evaluate and config.train.progress must be bools")
    return Setup(sim, net, bc_cfg)


def real_config(folder: str, sim: types.SimConfig) -> types.SimConfig:
    """The SimConfig to label a converted real-scene cache with (built by launch.build_scenes, usually with
    more object and road slots than training): the cache's own sizes, with the training observation sizes
    (partners, road segments: each cell's road list is nearest-first, so its first obs_road entries are what
    a cache built with the training obs_road holds) and episode length. Raises ValueError naming
    config.scenes.real when the cache cannot provide them."""
    path = os.path.join(folder, "sim_config.json")
    if not os.path.exists(path):
        raise ValueError(f"config.scenes.real={folder!r}: not a scenario cache (no sim_config.json)")
    with open(path) as f:
        built = types.SimConfig(**json.load(f))
    if built.obs_road < sim.obs_road or built.log_steps < sim.episode_steps + 1 or built.dt != sim.dt:
        raise ValueError(f"config.scenes.real={folder!r}: built with obs_road={built.obs_road}, "
                         f"log_steps={built.log_steps}, dt={built.dt}; training needs obs_road >= {sim.obs_road}, "
                         f"log_steps >= {sim.episode_steps + 1}, dt={sim.dt}")
    return dataclasses.replace(built, obs_partners=sim.obs_partners, obs_road=sim.obs_road,
                               partner_radius=sim.partner_radius, episode_steps=sim.episode_steps,
                               max_controlled=None)


def load_real(folder: str, sim: types.SimConfig):
    """(scene ids, bank [S, ...] with cell_road cut to sim.obs_road, SimConfig to label it with)."""
    from cp_jax.scenarios.cache import ScenarioCache

    cfg = real_config(folder, sim)
    names, bank = ScenarioCache(folder).load_bank()
    return names, bank.replace(cell_road=bank.cell_road[..., : sim.obs_road]), cfg


def run(config, workdir: str) -> dict[str, Any]:
    """Label, train, evaluate and save per config in workdir (module docstring). Returns
    {"labels" (labels.json's content), "final" (last epoch's metrics), "eval", "params", "seconds"}."""
    setup = resolve(config)
    t_start = time.perf_counter()
    run_dir = Run(workdir, config, keep=2, eval_key="epoch")
    sc = config.scenes
    names, train_bank = bank_lib.cached_procedural_bank(sc.cache_dir, sc.train, sc.train_seed, sc.agents, setup.sim)
    eval_bank = None
    if sc.eval:
        _, eval_bank = bank_lib.cached_procedural_bank(sc.cache_dir, sc.eval, sc.eval_seed, sc.agents, setup.sim)
    logging.info("%d procedural training scenes, %d held-out", len(names), sc.eval)
    sim_params = types.default_params()
    k_data, k_val, k_init, k_train, k_real = jax.random.split(jax.random.PRNGKey(config.seed), 5)

    t0 = time.perf_counter()
    data, label_stats = bc_lib.make_dataset(train_bank, sim_params, setup.sim, setup.bc, k_data)
    labels = dict(train=label_stats)
    if sc.real:
        real_names, real_bank, real_sim = load_real(sc.real, setup.sim)
        chunk = max(1, setup.bc.scene_chunk * setup.sim.max_agents // real_sim.max_agents)  # same memory per call
        real_data, labels["real"] = bc_lib.make_dataset(real_bank, sim_params, real_sim,
                                                        dataclasses.replace(setup.bc, scene_chunk=chunk), k_real)
        data = jax.tree.map(lambda a, b: np.concatenate([a, b]), data, real_data)
        logging.info("%d real scenes from %s: %d samples", len(real_names), sc.real, labels["real"]["samples"])
    val_data = None
    if eval_bank is not None:
        val_data, labels["held_out"] = bc_lib.make_dataset(eval_bank, sim_params, setup.sim, setup.bc, k_val,
                                                           noisy=False)
    labels["seconds"] = round(time.perf_counter() - t0, 1)
    if run_dir.primary:
        with open(run_dir.path("labels.json"), "w") as f:
            json.dump(labels, f, indent=2)
    logging.info("labels: %s", labels)

    net = networks.ActorCritic(setup.net)
    params = networks.init_params(setup.net, setup.sim, k_init)
    data = jax.device_put(bc_lib.pad(data, setup.bc.batch_size))
    steps_per_epoch = data.action.shape[0] // setup.bc.batch_size
    optimizer = bc_lib.make_optimizer(setup.bc, setup.bc.epochs * steps_per_epoch)
    epoch_fn = bc_lib.make_epoch(net, setup.bc, optimizer)
    evaluate = bc_lib.make_evaluate(net, setup.bc.batch_size)
    if val_data is not None and val_data.action.shape[0]:
        val_data = jax.device_put(bc_lib.pad(val_data, setup.bc.batch_size))
    else:
        val_data = None

    state, done = run_dir.restore(State(params, optimizer.init(params), jnp.zeros((), jnp.int32)))
    bar = Progress(setup.bc.epochs, "behaviour cloning", initial=done, disable=not config.train.progress,
                   unit="epochs")
    row: dict[str, float] = {}
    clock = dict(t=time.perf_counter())

    def step(s: State):
        p, o, stats = epoch_fn(s.params, s.opt_state, data, jax.random.fold_in(k_train, s.epoch))
        return State(p, o, s.epoch + 1), stats

    def after(done: int, s: State, stats, last: bool) -> None:
        nonlocal row
        row = {k: float(v) for k, v in jax.device_get(stats).items()}
        now = time.perf_counter()
        row["samples_per_s"] = float(data.action.shape[0]) / max(now - clock["t"], 1e-9)
        clock["t"] = now
        if val_data is not None:
            row.update({f"val_{k}": float(v) for k, v in jax.device_get(evaluate(s.params, val_data)).items()})
        run_dir.writer.write(done, row)
        bar.update(1, {"loss": row["loss"], "acc": row["accuracy"]})

    state, _ = run_dir.iterate(state, step, done, lambda _, d: d < setup.bc.epochs, after, ckpt_every=1)
    bar.close()

    result = {}
    if eval_bank is not None and config.train.evaluate:
        result = evaluate_styles(net, state.params, eval_bank, (setup.bc.style,), setup.sim, config.seed)
        if run_dir.primary:
            with open(run_dir.path("eval.json"), "w") as f:
                json.dump(dict(epochs=setup.bc.epochs, samples=int(np.sum(np.asarray(data.weight))), styles=result),
                          f, indent=2)
    if run_dir.primary:
        saved.save(run_dir.path("policy"), setup.net, state.params, setup.sim)
    run_dir.close()
    return dict(labels=labels, final=row, eval=result, params=state.params, seconds=time.perf_counter() - t_start)
