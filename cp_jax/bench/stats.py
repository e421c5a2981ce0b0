"""Spread and intervals for benchmark tables: the sample standard deviation over seeds and paired
bootstrap intervals over (scene, ego) pairs.

    sample_std([50.0, 60.0])                     # 7.07 (ddof = 1); nan for fewer than two values
    pm(55.0, sample_std([55.0]))                 # "55.00 ± n/a": one seed has no spread
    d = paired_difference(records, "counterplay", "anchor", regimes, "interactive")
    d.mean, d.lo, d.hi, d.pairs                  # method - reference, 95% interval, pairs matched

A paired difference matches the two policies pair by pair: for each (scene_id, ego) of the split both
policies ran, each side's value is the mean over its episodes there (every regime, benchmark seed and,
for a method, every post-training run METHOD_sSEED); the difference is the mean over pairs of method
minus reference, and its interval the 2.5 / 97.5 percentiles of that mean when the scenes are resampled
with replacement, each with all its pairs (a cluster bootstrap: a scene's pairs share its traffic;
`n_boot` times, a fixed generator seed, so tables are reproducible). The post-training runs are pooled,
not resampled: their spread is the ± std over runs beside it.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import numpy as np

METRIC_SCALE = {"score": 1.0, "clean": 100.0}  # table units: score is 0-100 already, clean rates in %


def sample_std(values) -> float:
    """Standard deviation with ddof = 1; nan for fewer than two values (one seed has no spread)."""
    v = np.asarray(list(values), np.float64)
    return float(np.std(v, ddof=1)) if v.size >= 2 else float("nan")


def pm(mean: float, std: float, digits: int = 2) -> str:
    """'mean ± std', or 'mean ± n/a' when std is nan (a single seed or run)."""
    spread = "n/a" if not np.isfinite(std) else f"{std:.{digits}f}"
    return f"{mean:.{digits}f} ± {spread}"


class Difference(NamedTuple):
    mean: float  # method - reference, in table units (METRIC_SCALE)
    lo: float  # 95% interval (bootstrap over scenes)
    hi: float
    pairs: int  # (scene, ego) pairs both policies ran

    def text(self, digits: int = 2) -> str:
        if not self.pairs:
            return "—"
        return f"{self.mean:+.{digits}f} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]"

    @property
    def verdict(self) -> str:
        """'higher' / 'lower' when the interval excludes 0, else 'inconclusive'."""
        if not self.pairs:
            return "n/a"
        return "higher" if self.lo > 0 else "lower" if self.hi < 0 else "inconclusive"


def method_of(policy: str) -> str:
    """'counterplay_s2' -> 'counterplay': post-training runs are named METHOD_sSEED."""
    head, sep, tail = policy.rpartition("_s")
    return head if sep and tail.isdigit() else policy


def all_pair_means(records: list[dict], regimes, split: str, metric: str = "score", ego_style: str = "normal",
                   group: bool = True) -> dict[str, dict[tuple, float]]:
    """{method: {(scene_id, ego): mean of `metric`}} in one pass over the records of `split` (controlled
    egos, the given regimes, every benchmark seed): a method's runs METHOD_sSEED pooled (`method_of`), or
    with group=False every policy name on its own."""
    regimes = set(regimes)
    sums = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
    for r in records:
        if r["split"] == split and r["ego_style"] == ego_style and r["regime"] in regimes and r["ego_controlled"]:
            cell = sums[method_of(r["policy"]) if group else r["policy"]][(r["scene_id"], r["ego"])]
            cell[0] += float(r[metric])
            cell[1] += 1
    return {m: {k: total / n for k, (total, n) in pairs.items()} for m, pairs in sums.items()}


def pair_means(records: list[dict], method: str, regimes, split: str, metric: str = "score",
               ego_style: str = "normal") -> dict[tuple, float]:
    """`all_pair_means` of one method (its runs pooled)."""
    return all_pair_means(records, regimes, split, metric, ego_style).get(method, {})


def difference(a: dict[tuple, float], b: dict[tuple, float], scale: float = 1.0, n_boot: int = 2000,
               seed: int = 0) -> Difference:
    """scale * (a - b) over the (scene_id, ego) pairs both hold, with a 95% interval from a bootstrap that
    resamples scenes (the pairs of one scene share its traffic and are not independent)."""
    keys = sorted(set(a) & set(b))
    if not keys:
        return Difference(float("nan"), float("nan"), float("nan"), 0)
    d = scale * np.array([a[k] - b[k] for k in keys])
    scene_of = {s: i for i, s in enumerate(dict.fromkeys(k[0] for k in keys))}
    cluster = np.array([scene_of[k[0]] for k in keys])
    sums, counts = np.bincount(cluster, d), np.bincount(cluster).astype(np.float64)
    idx = np.random.default_rng(seed).integers(0, len(sums), size=(n_boot, len(sums)))
    boot = sums[idx].sum(1) / counts[idx].sum(1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return Difference(float(d.mean()), float(lo), float(hi), len(keys))


def paired_difference(records: list[dict], method: str, reference: str, regimes, split: str,
                      metric: str = "score", ego_style: str = "normal", n_boot: int = 2000,
                      seed: int = 0) -> Difference:
    """method - reference over the pairs both ran (module docstring), with a 95% bootstrap interval."""
    means = all_pair_means(records, regimes, split, metric, ego_style)
    return difference(means.get(method, {}), means.get(reference, {}), METRIC_SCALE.get(metric, 1.0), n_boot, seed)
