"""Scenario banks: many scenes padded to one SimConfig and stacked on a leading axis."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import shutil
import tempfile

import numpy as np

from cp_jax.scenarios.builder import build_scenario
from cp_jax.scenarios.procedural import generator, layouts
from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import env
from cp_jax.sim.types import Scenario, SimConfig


def procedural_scenes(num_scenes: int, seed: int = 0, num_agents: int = 12, kinds=None,
                      first: int = 0, max_objects: int | None = None,
                      max_road_segments: int | None = None) -> list[RawScene]:
    """num_scenes procedural scenes, seeds seed, seed+1, ..., cycling through kinds (default: LAYOUT_KINDS)
    from kind number `first`: the scenes first .. first + num_scenes - 1 of a longer such sequence
    (a slice of a bank, e.g. one scene group) when seed is that sequence's seed + first. max_objects,
    max_road_segments: generator.generate's caps (e.g. SimConfig.max_agents, .max_road_segments)."""
    kinds = tuple(kinds or layouts.LAYOUT_KINDS)
    return [generator.generate(seed + i, kinds[(first + i) % len(kinds)], num_agents, max_objects=max_objects,
                               max_road_segments=max_road_segments) for i in range(num_scenes)]


def make_bank(raws: list[RawScene], cfg: SimConfig) -> Scenario:
    """Build every scene with cfg and stack them: a Scenario with leading axis [N]."""
    return env.stack_scenarios([build_scenario(r, cfg) for r in raws])


def _generator_digest() -> str:
    """Hash of the procedural generator's source: a changed generator never reuses an old cache."""
    return hashlib.sha1((inspect.getsource(generator) + inspect.getsource(layouts)).encode()).hexdigest()[:8]


def cached_procedural_bank(
    cache_dir: str, num_scenes: int, seed: int, num_agents: int, cfg: SimConfig, first: int = 0,
    kinds: tuple[str, ...] | None = None,
) -> tuple[list[str], Scenario]:
    """`procedural_scenes(num_scenes, seed, num_agents, kinds, first)` built with cfg, converted once into
    a scenario cache under cache_dir (keyed by the arguments, every SimConfig field and the generator's
    source) and read back from it afterwards; cache_dir "": built in memory, no cache (and no TFDS: the
    install-free accelerator runs). Returns (scene names, bank [N, ...]) in seed order."""
    if not cache_dir:
        raws = procedural_scenes(num_scenes, seed, num_agents, kinds=kinds, first=first, max_objects=cfg.max_agents,
                                 max_road_segments=cfg.max_road_segments)
        return [r.name for r in raws], make_bank(raws, cfg)
    from cp_jax.scenarios import cache  # tensorflow-datasets: imported only when a cache is used

    fields = dict(n=num_scenes, seed=seed, agents=num_agents, sim=dataclasses.asdict(cfg), gen=_generator_digest())
    if first:  # (absent for 0, so the caches made before this argument keep their keys)
        fields["first"] = first
    if kinds:  # (likewise absent for the default cycle)
        fields["kinds"] = list(kinds)
    key = json.dumps(fields, sort_keys=True)
    folder = os.path.join(os.path.expanduser(cache_dir),
                          f"procedural_{seed}_{num_scenes}x{num_agents}_{hashlib.sha1(key.encode()).hexdigest()[:10]}")
    if not os.path.exists(os.path.join(folder, "sim_config.json")):
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".building_", dir=os.path.dirname(folder))
        raws = procedural_scenes(num_scenes, seed, num_agents, kinds=kinds, first=first, max_objects=cfg.max_agents,
                                 max_road_segments=cfg.max_road_segments)
        cache.build_cache(tmp, cfg, lambda: ((r.name, build_scenario(r, cfg)) for r in raws))
        try:
            os.rename(tmp, folder)  # atomic: a killed build never leaves a half cache under the final name
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    names, bank = cache.ScenarioCache(folder).load_bank()
    order = sorted(range(len(names)), key=lambda i: int(names[i].rsplit("_", 1)[1]))
    return [names[i] for i in order], env.take_scenario(bank, np.asarray(order))
