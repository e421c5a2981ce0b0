"""The scenes and splits a benchmark runs on: a scenario bank plus, per split, its (scene, ego) pairs.

- `procedural_suite`: procedural scenes (seeds 300000+ by default: never used for training, the
  anchor's held-out evaluation or the quickstart), every eligible pair scored by
  `cp_jax.scenarios.splits`, the Interactive split = the top n by interactivity, the Random split
  = n sampled with a seed.
- `cached_suite`: a converted scenario cache (`launch.build_scenes`) plus split manifests written by
  `launch.make_splits` (interactive.csv, random.csv). Pairs name scenes by id and egos by object
  index; every pair is checked against the built scene (the scene exists, the ego is a valid,
  controllable vehicle at t = 0), errors name the manifest and the pair.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import numpy as np

from cp_jax.scenarios import bank as bank_lib
from cp_jax.scenarios import splits as splits_lib
from cp_jax.sim import types
from cp_jax.sim.types import Scenario, SimConfig

SPLITS = ("interactive", "random")
PROCEDURAL_SEED = 300_000


class SplitPairs(NamedTuple):
    pairs: list  # [splits.Pair]
    scene: np.ndarray  # [P] int: index into the suite's bank
    ego: np.ndarray  # [P] int: agent slot
    warning: str = ""


class Suite(NamedTuple):
    names: list[str]  # scene ids, bank order
    bank: Scenario  # [N, ...]
    cfg: SimConfig  # what the bank was built with
    splits: dict[str, SplitPairs]


def _index(pairs, names: list[str], where: str) -> SplitPairs:
    index = {n: i for i, n in enumerate(names)}
    missing = [p.scene_id for p in pairs if p.scene_id not in index]
    if missing:
        raise ValueError(f"{where}: scene ids not in the scene set: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    scene = np.array([index[p.scene_id] for p in pairs], np.int32)
    ego = np.array([int(p.ego) for p in pairs], np.int32)
    return SplitPairs(list(pairs), scene, ego)


def procedural_suite(
    num_scenes: int, num_pairs: int, cfg: SimConfig, seed: int = PROCEDURAL_SEED, agents: int = 12,
    split_seed: int = 0, cache_dir: str = "~/.cache/cp_jax/scenes",
) -> Suite:
    """num_scenes procedural scenes and both splits of num_pairs pairs each."""
    raws = bank_lib.procedural_scenes(num_scenes, seed, agents, max_objects=cfg.max_agents)
    names, bank = bank_lib.cached_procedural_bank(cache_dir, num_scenes, seed, agents, cfg)
    pairs = splits_lib.score_scenes(raws)
    made = {"interactive": splits_lib.interactive_split(pairs, num_pairs),
            "random": splits_lib.random_split(pairs, num_pairs, split_seed)}
    out = {}
    for name, split in made.items():
        sp = _index(split, names, f"procedural {name} split")
        out[name] = sp._replace(warning=split.warning)
    return Suite(names, bank, cfg, out)


def cached_suite(cache_dir: str, manifests: str, split_names=SPLITS) -> Suite:
    """A converted scene cache and the manifests `manifests/<split>.csv`."""
    from cp_jax.scenarios import cache  # tensorflow-datasets only when a cache is read

    sc = cache.ScenarioCache(cache_dir)
    names, bank = sc.load_bank()
    cfg = sc.cfg
    out = {}
    for split in split_names:
        path = os.path.join(manifests, f"{split}.csv")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: missing (write it with launch.make_splits)")
        sp = _index(splits_lib.read_manifest(path), names, path)
        _check_egos(bank, sp, path)
        out[split] = sp
    return Suite(names, bank, cfg, out)


def _check_egos(bank: Scenario, sp: SplitPairs, path: str) -> None:
    b = jax.device_get(bank)
    a = b.agent_valid.shape[1]
    for p, s, e in zip(sp.pairs, sp.scene, sp.ego, strict=True):
        ok = 0 <= e < a and bool(b.agent_valid[s, e] and b.log_valid[s, e, 0] and b.controllable[s, e]
                                 and b.obj_type[s, e] == types.VEHICLE)
        if not ok:
            raise ValueError(f"{path}: pair ({p.scene_id}, ego {p.ego}): not a valid controllable vehicle at t=0 "
                             "in the converted scene (was the scene truncated to fewer objects?)")
