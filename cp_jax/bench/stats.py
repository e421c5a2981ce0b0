"""Spread and intervals for benchmark tables: the sample standard deviation over seeds and paired
two-level bootstrap intervals over post-training runs and scenes.

    sample_std([50.0, 60.0])                     # 7.07 (ddof = 1); nan for fewer than two values
    pm(55.0, sample_std([55.0]))                 # "55.00 ± n/a": one seed has no spread
    d = paired_difference(records, "counterplay", "anchor", regimes, "interactive")
    d.mean, d.lo, d.hi, d.pairs                  # method - reference, 95% interval, pairs matched

A paired difference matches the two policies pair by pair: for each (scene_id, ego) of the split that
every run of both policies ran, each run's value is its mean over its episodes there (every regime and
benchmark seed), a policy's value the mean over its post-training runs METHOD_sSEED (one run for the
anchor); the difference is the mean over pairs of method minus reference. Its 95% interval is the
2.5 / 97.5 percentiles of that mean when, `n_boot` times, each side's runs are resampled with
replacement and then the scenes, each with all its pairs (a scene's pairs share its traffic): the
interval holds both the post-training spread (a method whose runs disagree is not called better) and
the scene spread. A fixed generator seed keeps tables reproducible. With three runs a side the run level
is coarse (a bootstrap of three values), which is why the tables also print the ± std over runs.
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
    lo: float  # 95% interval (bootstrap over runs, then scenes)
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


def run_pair_means(records: list[dict], regimes, split: str, metric: str = "score", ego_style: str = "normal",
                   group: bool = True) -> dict[str, list[dict[tuple, float]]]:
    """{method: [{(scene_id, ego): mean of `metric`} per post-training run, runs in name order]} in one pass
    over the records of `split` (controlled egos, the given regimes, every benchmark seed): a method's runs
    METHOD_sSEED (`method_of`), or with group=False every policy name as a method of one run."""
    regimes = set(regimes)
    sums = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
    for r in records:
        if r["split"] == split and r["ego_style"] == ego_style and r["regime"] in regimes and r["ego_controlled"]:
            cell = sums[r["policy"]][(r["scene_id"], r["ego"])]
            cell[0] += float(r[metric])
            cell[1] += 1
    out = collections.defaultdict(list)  # methods in the records' order; runs by name (the bootstrap's order)
    for policy, pairs in sums.items():
        out[method_of(policy) if group else policy].append((policy, {k: total / n for k, (total, n) in pairs.items()}))
    return {m: [means for _, means in sorted(runs, key=lambda r: r[0])] for m, runs in out.items()}


def difference(a: list[dict[tuple, float]], b: list[dict[tuple, float]], scale: float = 1.0, n_boot: int = 2000,
               seed: int = 0) -> Difference:
    """scale * (a - b), each side a list of runs {(scene_id, ego): value} (one run: [values]), over the
    pairs every run holds, with the two-level bootstrap interval of the module docstring."""
    keys = sorted(set.intersection(*(set(r) for r in (*a, *b)))) if a and b else []
    if not keys:
        return Difference(float("nan"), float("nan"), float("nan"), 0)
    scene_of = {s: i for i, s in enumerate(dict.fromkeys(k[0] for k in keys))}
    cluster = np.array([scene_of[k[0]] for k in keys])
    counts = np.bincount(cluster).astype(np.float64)  # (S,) pairs per scene

    def scene_sums(side):  # (runs, S): each run's sum over a scene's pairs
        return np.stack([np.bincount(cluster, scale * np.array([r[k] for k in keys])) for r in side])

    sa, sb = scene_sums(a), scene_sums(b)
    mean = float((sa.mean(0) - sb.mean(0)).sum() / counts.sum())
    rng = np.random.default_rng(seed)

    def run_weights(n):  # (n_boot, n): how often each run is drawn, over n draws
        draws = rng.integers(0, n, size=(n_boot, n, 1)) == np.arange(n)
        return draws.mean(1) if n > 1 else np.ones((n_boot, 1))

    per_scene = run_weights(len(a)) @ sa - run_weights(len(b)) @ sb  # (n_boot, S)
    scenes = rng.integers(0, len(counts), size=(n_boot, len(counts)))
    boot = np.take_along_axis(per_scene, scenes, 1).sum(1) / counts[scenes].sum(1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return Difference(mean, float(lo), float(hi), len(keys))


def paired_difference(records: list[dict], method: str, reference: str, regimes, split: str,
                      metric: str = "score", ego_style: str = "normal", n_boot: int = 2000,
                      seed: int = 0) -> Difference:
    """method - reference over the pairs every run of both ran (module docstring), with a 95% interval."""
    means = run_pair_means(records, regimes, split, metric, ego_style)
    return difference(means.get(method, []), means.get(reference, []), METRIC_SCALE.get(metric, 1.0), n_boot, seed)
