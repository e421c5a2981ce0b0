"""Train the "SMART stand-in (BC)" traffic policy: behaviour cloning on inverse-dynamics labels.

    python -m launch.train_bc --config=experiments/bc_small.py --workdir=runs/bc_small
    python -m launch.train_bc --config=experiments/bc_small.py --config.scenes.real=DIR --workdir=...

Every field is validated before any work (errors name `config.x`). Then the procedural banks are
read or built (the anchors' cached banks) and labelled and observed (cp_jax.rl.bc: closed-loop
tracking, optional noisy recovery passes); a converted real-scene cache (launch.build_scenes, any
object / road slot counts, obs_road >= the training one; see `real_config`) is labelled with its own
sizes and its samples join the training set. The network (the small preset without a condition
branch; with `--config.net.overrides.condition=True` the anchor's conditioned network, its condition
slot set to bc.style, which `launch.train_anchor --config.init_from=WORKDIR/policy` can start from)
is fitted with cross-entropy for bc.epochs epochs. The workdir gets run_info.json,
labels.json (sample counts, label-tracking errors vs the logs), metrics.jsonl + tb/ (loss and
accuracies per epoch, train and held-out), eval.json (greedy closed-loop self-play on the held-out
scenes, every controllable agent driven by the policy) and the policy in workdir/policy
(cp_jax.policy.saved). Re-running in the same workdir starts over (the metric log is truncated).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, NamedTuple

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    """--workdir and --config; defined only when run as a program, so importing this module (tests use
    `resolve` / `run`) never clashes with other launch modules' flags of the same names."""
    flags.DEFINE_string("workdir", None, "run folder (created)")
    config_flags.DEFINE_config_file(
        "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "bc_small.py"),
        "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
    )
    flags.mark_flags_as_required(["workdir"])


class Setup(NamedTuple):
    sim: Any  # types.SimConfig
    net: Any  # networks.NetConfig
    bc: Any  # bc.BCConfig


def resolve(config) -> Setup:
    """Static configs from an experiment ConfigDict; raises ValueError naming the bad field."""
    from cp_jax.policy import networks
    from cp_jax.rl import bc as bc_lib
    from cp_jax.rl.trainer import config_fields
    from cp_jax.sim import types

    sim = types.SimConfig(**config_fields(types.SimConfig, config.sim, "sim"))
    if not sim.discrete_actions:
        raise ValueError("config.sim.discrete_actions must be True (labels are indices of the action grid)")
    presets = networks.PRESETS
    if config.net.preset not in presets:
        raise ValueError(f"config.net.preset: unknown {config.net.preset!r}; known: {sorted(presets)}")
    overrides = config_fields(networks.NetConfig, config.net.overrides, "net.overrides")
    overrides.setdefault("condition", False)  # True: an anchor-shaped network (its condition slot: bc.style)
    net = dataclasses.replace(presets[config.net.preset](), **overrides)
    if net.lstm:
        raise ValueError("config.net.overrides.lstm: behaviour cloning trains feed-forward networks only (lstm=0)")
    fields = config_fields(bc_lib.BCConfig, config.bc, "bc")
    try:
        bc_cfg = bc_lib.BCConfig(**fields)
    except ValueError as e:  # re-raised with the config path of the field
        raise ValueError(str(e).replace("BCConfig.", "config.bc.")) from None
    sc = config.scenes
    if sc.train < 1 or sc.eval < 0:
        raise ValueError("config.scenes.train must be >= 1 and config.scenes.eval >= 0")
    if sc.eval and abs(sc.eval_seed - sc.train_seed) < sc.train:
        raise ValueError("config.scenes.eval_seed: held-out seeds overlap the training seeds")
    if sc.real:
        real_config(sc.real, sim)  # raises naming config.scenes.real
    if not isinstance(config.train.evaluate, bool) or not isinstance(config.train.progress, bool):
        raise ValueError("config.train.evaluate and config.train.progress must be bools")
    return Setup(sim, net, bc_cfg)


def real_config(folder: str, sim):
    """The SimConfig to label a converted real-scene cache with (built by launch.build_scenes, usually with
    more object and road slots than training): the cache's own sizes, with the training observation sizes
    (partners, road segments: each cell's road list is nearest-first, so its first obs_road entries are what
    a cache built with the training obs_road holds) and episode length. Raises ValueError naming
    config.scenes.real when the cache cannot provide them."""
    from cp_jax.sim import types

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


def load_real(folder: str, sim):
    """(scene ids, bank [S, ...] with cell_road cut to sim.obs_road, SimConfig to label it with)."""
    from cp_jax.scenarios.cache import ScenarioCache

    cfg = real_config(folder, sim)
    names, bank = ScenarioCache(folder).load_bank()
    return names, bank.replace(cell_road=bank.cell_road[..., : sim.obs_road]), cfg


def run(config, workdir: str) -> dict[str, Any]:
    """Label, train, evaluate and save per config in workdir (module docstring). Returns
    {"labels" (labels.json's content), "final" (last epoch's metrics), "eval", "params", "seconds"}."""
    import jax
    import numpy as np

    from cp_jax.io.metrics import MetricWriter, Progress
    from cp_jax.io.run_info import write_run_info
    from cp_jax.policy import networks, saved
    from cp_jax.rl import bc as bc_lib
    from cp_jax.rl import trainer
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.sim import types

    setup = resolve(config)
    t_start = time.perf_counter()
    os.makedirs(workdir, exist_ok=True)
    write_run_info(workdir, config)
    sc = config.scenes
    names, train_bank = bank_lib.cached_procedural_bank(sc.cache_dir, sc.train, sc.train_seed, sc.agents, setup.sim)
    eval_bank = None
    if sc.eval:
        _, eval_bank = bank_lib.cached_procedural_bank(sc.cache_dir, sc.eval, sc.eval_seed, sc.agents, setup.sim)
    logging.info("%d procedural training scenes, %d held-out", len(names), sc.eval)
    sim_params = types.default_params()
    key = jax.random.PRNGKey(config.seed)
    k_data, k_val, k_init, k_train, k_real = jax.random.split(key, 5)

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
    with open(os.path.join(workdir, "labels.json"), "w") as f:
        json.dump(labels, f, indent=2)
    logging.info("labels: %s", labels)

    net = networks.ActorCritic(setup.net)
    params = networks.init_params(setup.net, setup.sim, k_init)
    data = jax.device_put(bc_lib.pad(data, setup.bc.batch_size))
    steps_per_epoch = data.action.shape[0] // setup.bc.batch_size
    optimizer = bc_lib.make_optimizer(setup.bc, setup.bc.epochs * steps_per_epoch)
    opt_state = optimizer.init(params)
    epoch_fn = bc_lib.make_epoch(net, setup.bc, optimizer)
    evaluate = bc_lib.make_evaluate(net, setup.bc.batch_size)
    if val_data is not None and val_data.action.shape[0]:
        val_data = jax.device_put(bc_lib.pad(val_data, setup.bc.batch_size))
    else:
        val_data = None

    writer = MetricWriter(workdir)
    writer.truncate_after(0)  # a re-run in the same workdir starts over
    bar = Progress(setup.bc.epochs, "epochs", disable=not config.train.progress)
    row: dict[str, float] = {}
    for epoch in range(setup.bc.epochs):
        t0 = time.perf_counter()
        params, opt_state, stats = epoch_fn(params, opt_state, data, jax.random.fold_in(k_train, epoch))
        row = {k: float(v) for k, v in jax.device_get(stats).items()}
        row["samples_per_s"] = float(data.action.shape[0]) / max(time.perf_counter() - t0, 1e-9)
        if val_data is not None:
            row.update({f"val_{k}": float(v) for k, v in jax.device_get(evaluate(params, val_data)).items()})
        writer.write(epoch + 1, row)
        bar.update(1, {"loss": row["loss"], "acc": row["accuracy"]})
    bar.close()
    writer.close()

    result = {}
    if eval_bank is not None and config.train.evaluate:
        result = trainer.evaluate_styles(net, params, eval_bank, (setup.bc.style,), setup.sim, config.seed)
        with open(os.path.join(workdir, "eval.json"), "w") as f:
            json.dump(dict(epochs=setup.bc.epochs, samples=int(np.sum(np.asarray(data.weight))), styles=result), f,
                      indent=2)
    saved.save(os.path.join(workdir, "policy"), setup.net, params, setup.sim)
    return dict(labels=labels, final=row, eval=result, params=params, seconds=time.perf_counter() - t_start)


def main(_):
    config = FLAGS.config
    resolve(config)  # validates every field before any work
    logging.info("behaviour cloning in %s", FLAGS.workdir)
    result = run(config, FLAGS.workdir)
    print(json.dumps(dict(labels=result["labels"], final=result["final"], eval=result["eval"]), indent=1))
    print(f"done in {result['seconds']:.0f}s -> {FLAGS.workdir}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
