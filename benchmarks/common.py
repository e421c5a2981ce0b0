"""Helpers shared by the benchmark scripts (run as `python benchmarks/NAME.py`, so this is `common`)."""

from __future__ import annotations

import resource
import statistics
import time

import jax


def timed(fn, n: int):
    """(median seconds over n calls after one warm-up call, the last output); outputs are blocked on."""
    out = jax.block_until_ready(fn())
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def peak_memory_gb() -> dict[str, float]:
    """Peak memory so far: host RSS, and the devices' peak bytes in use where the backend reports it
    (GPU / TPU; the sum over this process's devices)."""
    out = {"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    if all(p is not None for p in peaks):
        out["peak_device_gb"] = sum(peaks) / 2**30
    return out


def procedural_bank(cache_dir: str, scenes: int, agents: int, sim):
    """The benchmarks' bank: procedural scenes (seeds 0 ..) from the scenario cache under cache_dir, or
    generated in memory when cache_dir is empty (no TFDS needed: the install-free GPU check)."""
    from cp_jax.scenarios import bank as bank_lib

    return bank_lib.cached_procedural_bank(cache_dir, scenes, 0, agents, sim)[1]
