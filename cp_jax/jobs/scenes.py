"""The scenes a job trains and validates on: procedural banks (cached) plus an optional converted
real-scene cache, whole or in groups of scenes per device.

    train_bank, held_out_bank, names = load(config.scenes, sim)              # every scene, on the device
    train_bank, held_out_bank, names = load(config.scenes, sim, groups=[0, 1], num_groups=4)  # host, grouped
    stream, held_out_bank = streamed(config.scenes, sim, mesh, num_groups, seed)  # config.scenes.stream set

With `scenes.stream` (a cache folder, e.g. built by `launch.build_scenes --workers`) the training bank is
not fixed: `scenes.train` scenes at a time are read from the cache (scenarios/stream.py) and a new bank
replaces the old every `scenes.refresh_every` updates, so host and device memory are bounded by the bank.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from cp_jax import parallel
from cp_jax.scenarios import bank as bank_lib
from cp_jax.scenarios.procedural import layouts
from cp_jax.sim import types


def check(sc, streams: bool = False) -> None:
    """Validate a config's `scenes` section (streams: whether the job can stream, `streamed`); raises
    ValueError naming the field."""
    if sc.train < 1 or sc.eval < 0:
        raise ValueError("config.scenes.train must be >= 1 and config.scenes.eval >= 0")
    if sc.eval and abs(sc.eval_seed - sc.train_seed) < sc.train:
        raise ValueError("config.scenes.eval_seed: held-out seeds overlap the training seeds")
    layouts.check_kinds(sc.get("kinds", ()), "config.scenes.kinds")
    if sc.get("real", "") and not os.path.exists(os.path.join(sc.real, "sim_config.json")):
        raise ValueError(f"config.scenes.real={sc.real!r}: not a scenario cache (no sim_config.json)")
    if sc.get("stream", ""):
        if not streams:
            raise ValueError("config.scenes.stream: this job reads one fixed training bank (launch.train_anchor "
                             "streams); leave it empty")
        if not os.path.exists(os.path.join(sc.stream, "sim_config.json")):
            raise ValueError(f"config.scenes.stream={sc.stream!r}: not a scenario cache (no sim_config.json)")
        if sc.get("refresh_every", 0) < 1:
            raise ValueError("config.scenes.refresh_every must be >= 1 (updates between banks) with "
                             "config.scenes.stream")
        for field in ("real", "kinds"):
            if sc.get(field):
                raise ValueError(f"config.scenes.{field} applies to the procedural training bank; with "
                                 "config.scenes.stream the cache holds every training scene (build it with them)")


def check_groups(num_groups: int, mesh, train_scenes: int, field: str) -> None:
    """Scene groups (bank_groups > 1) must split evenly over the devices and the training scenes."""
    if num_groups == 1:
        return
    if num_groups % parallel.size(mesh):
        raise ValueError(f"{field} ({num_groups}) must be a multiple of the number of devices ({parallel.size(mesh)})")
    if train_scenes % num_groups:
        raise ValueError(f"config.scenes.train ({train_scenes}) must be a multiple of {field} ({num_groups})")


def load(sc, sim: types.SimConfig, groups: list[int] | None = None, num_groups: int = 1,
         field: str = "config.ppo.bank_groups"):
    """(train bank, held-out bank or None, scene names) for a config's scenes section sc. groups: read
    only those of num_groups scene groups (group g: procedural seeds train_seed + g n .. + (g + 1) n - 1
    with n = train / num_groups, then its share of the real scenes) and return the bank grouped
    [len(groups), scenes per group, ...]; field names the setting in errors."""
    real = None
    if sc.get("real", ""):
        from cp_jax.scenarios import cache as cache_lib

        real = cache_lib.ScenarioCache(sc.real)
        cache_lib.bank_for(real.cfg, real[0][1], sim, f"config.scenes.real={sc.real!r}")  # sizes checked up front
    eval_bank = held_out(sc, sim)
    if groups is None:  # one group holding every scene, unstacked and device-resident
        names, bank = _group(sc, sim, real, 0, sc.train, len(real) if real is not None else 0)
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
        group_names, bank = _group(sc, sim, real, g, n, r)
        names += group_names
        banks.append(jax.tree.map(np.asarray, bank))
    # Stacked on the host: parallel.shard_groups puts each group on its own device.
    return jax.tree.map(lambda *x: np.stack(x), *banks), eval_bank, names


def held_out(sc, sim: types.SimConfig):
    """The held-out procedural bank [sc.eval, ...] (seeds sc.eval_seed ..), or None for sc.eval = 0."""
    if not sc.eval:
        return None
    return bank_lib.cached_procedural_bank(sc.cache_dir, sc.eval, sc.eval_seed, sc.agents, sim)[1]


def _group(sc, sim: types.SimConfig, real, g: int, n: int, r: int):
    """(names, bank [n + r, ...]) of scene group g: procedural seeds train_seed + g n .. + (g + 1) n - 1
    (layout kinds cycled from sc.kinds, default LAYOUT_KINDS; the held-out bank keeps the default), then
    real scenes g r .. (g + 1) r - 1 of the cache real (None: none)."""
    names, bank = bank_lib.cached_procedural_bank(sc.cache_dir, n, sc.train_seed + g * n, sc.agents, sim, first=g * n,
                                                  kinds=tuple(sc.get("kinds", ())) or None)
    if real is not None:
        from cp_jax.scenarios import cache as cache_lib  # tensorflow-datasets: only with a real-scene cache

        real_names, real_bank = real.load_bank(list(range(g * r, (g + 1) * r)))
        real_bank = cache_lib.bank_for(real.cfg, real_bank, sim, f"config.scenes.real={sc.real!r}")
        names = names + real_names
        bank = jax.tree.map(lambda a, b: np.concatenate([a, b]), bank, real_bank)
    return names, bank


def placed(sc, sim: types.SimConfig, mesh, num_groups: int, field: str):
    """`load` for a run on mesh: (train bank replicated on every device, or its num_groups groups split
    over them; held-out bank or None; names of this process's scenes)."""
    grouped = num_groups > 1
    bank, eval_bank, names = load(sc, sim, parallel.local_groups(num_groups, mesh) if grouped else None, num_groups,
                                  field)
    logging.info("%d training scenes%s, %s held-out", len(names),
                 f" (this process's of {num_groups} groups)" if grouped else "", sc.eval)
    return place(bank, mesh, num_groups), eval_bank, names


def place(bank, mesh, num_groups: int):
    """A host bank on the mesh: replicated, or with num_groups > 1 this process's groups [len(local), ...]
    split over their devices (`parallel.shard_groups`)."""
    return parallel.shard_groups(bank, mesh, num_groups) if num_groups > 1 else parallel.replicate(bank, mesh)


def streamed(sc, sim: types.SimConfig, mesh, num_groups: int, seed: int):
    """(BankStream of sc.train scenes per bank from the cache sc.stream, seeded by seed, reading only this
    process's scene groups; held-out bank or None) for a run on mesh."""
    from cp_jax.scenarios import stream as stream_lib  # grain and tensorflow-datasets: only when streaming

    groups = parallel.local_groups(num_groups, mesh) if num_groups > 1 else [0]
    stream = stream_lib.BankStream(sc.stream, sc.train, seed, sim, groups, num_groups)
    eval_bank = held_out(sc, sim)
    logging.info("streaming banks of %d scenes from %s (%d scenes), a new bank every %d updates%s; %s held-out",
                 sc.train, sc.stream, len(stream), sc.refresh_every,
                 f" (this process's of {num_groups} groups)" if num_groups > 1 else "", sc.eval)
    return stream, eval_bank
