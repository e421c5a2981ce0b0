"""Training banks streamed from a scenario cache with grain: host and device memory bounded by the
bank, not by the dataset.

    stream = BankStream(cache_dir, size=448, seed=0, sim=sim)     # groups=(0,), num_groups=1: every scene
    it = stream.iterator(start=0)      # a grain DatasetIterator; it.get_state() == {"next_index": banks read}
    names, bank = next(it)             # bank 0: Scenario of numpy arrays [size, ...]
    names, bank = stream[5]            # bank 5, read directly (the same as the iterator's sixth)

The scenes form an endless sequence: the cache's scenes in a seeded order, shuffled again every epoch
(grain's MapDataset shuffle + repeat). Bank j of one group is positions j n .. (j + 1) n - 1 of that
group's share, n = size / num_groups; group g's share is positions g, g + G, g + 2G, ... of the
sequence (G = num_groups), so groups (the devices and hosts of a run with scene groups) read disjoint
scenes, and a process reads only its own groups. With groups (g1, g2, ...) a bank is stacked
[len(groups), n, ...] (the layout `parallel.shard_groups` places); with num_groups = 1, [size, ...].
Bank j is a pure function of (cache, seed, size, groups, j): a resumed run asks the iterator for the
bank it had (`iterator(start=j)`, or `set_state`) and reads exactly what it would have read. Banks are
read ahead by one background thread (grain ReadOptions), one bank at a time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import grain
import jax
import numpy as np

from cp_jax.scenarios import cache as cache_lib
from cp_jax.sim.types import Scenario, SimConfig


class _Banks(Sequence):
    """Bank j of every group in `groups`, stacked; an endless random-access source for grain."""

    def __init__(self, shares: list[grain.MapDataset], grouped: bool):
        self.shares, self.grouped = shares, grouped

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, j: int):
        parts = [share[j] for share in self.shares]
        names = [n for part_names, _ in parts for n in part_names]
        banks = [bank for _, bank in parts]
        return names, (jax.tree.map(lambda *x: np.stack(x), *banks) if self.grouped else banks[0])


def _stack(items) -> tuple[list[str], Scenario]:
    return [name for name, _ in items], jax.tree.map(lambda *x: np.stack(x), *[s for _, s in items])


class BankStream:
    """Banks of `size` scenes from the cache at cache_dir for runs with SimConfig sim (module docstring).
    The cache's stored sizes are checked against sim up front (`cache.bank_for`: a ValueError naming
    cache_dir and the field); each scene's road lists are cut to sim.obs_road."""

    def __init__(self, cache_dir: str, size: int, seed: int, sim: SimConfig, groups: Sequence[int] = (0,),
                 num_groups: int = 1):
        if size < 1 or size % num_groups:
            raise ValueError(f"bank size {size} must be a positive multiple of the scene groups ({num_groups})")
        if not groups or any(not 0 <= g < num_groups for g in groups):
            raise ValueError(f"scene groups {list(groups)} must lie in 0 .. {num_groups - 1}")
        self.cache = cache_lib.ScenarioCache(cache_dir)
        if len(self.cache) < size:
            raise ValueError(f"{cache_dir}: {len(self.cache)} scenes, fewer than a bank of {size}")
        cache_lib.bank_for(self.cache.cfg, self.cache[0][1], sim, cache_dir)  # sizes checked once, here
        self.size, self.groups, self.num_groups = size, tuple(groups), num_groups
        obs_road = sim.obs_road

        def cut(item):
            name, scene = item
            return name, scene.replace(cell_road=scene.cell_road[..., :obs_road])

        scenes = grain.MapDataset.source(self.cache).seed(seed).shuffle().repeat().map(cut)
        n = size // num_groups
        shares = [scenes.slice(slice(g, None, num_groups)).batch(n, batch_fn=_stack) for g in self.groups]
        self._banks = grain.MapDataset.source(_Banks(shares, grouped=num_groups > 1))

    def __len__(self) -> int:
        """Scenes in the cache (the stream itself never ends)."""
        return len(self.cache)

    def __getitem__(self, j: int) -> tuple[list[str], Scenario]:
        """(scene names, bank j) read directly (no read-ahead)."""
        return self._banks[j]

    def iterator(self, start: int = 0) -> grain.DatasetIterator:
        """A grain iterator from bank `start` on, reading one bank ahead in a background thread; its state
        (get_state / set_state) is {"next_index": the next bank}."""
        it = self._banks.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=1)).__iter__()
        if start:
            it.set_state({"next_index": int(start)})
        return it
