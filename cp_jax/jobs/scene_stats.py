"""The scene-statistics job behind `launch.scene_stats`: what a driving policy depends on (start offsets
and speeds, edge clearance, density, curvature, lane widths, segment lengths; cp_jax/scenarios/stats.py)
for several scene sets, side by side.

    sets = {"procedural (training)": ("procedural", 112), "real (validation)": ("cache", "runs/real_val")}
    summary = scene_stats(sets, out, saved.load("assets/anchors/conditioned_small").sim)

A set is ("procedural", n) or ("procedural", n, kinds): the anchor's n training scenes (seeds 0..,
12 agents, as experiments/anchor_small.py; built with the given SimConfig; layout kinds cycled from
kinds, default the default cycle, as config.scenes.kinds), or
("cache", folder): a converted scene cache (launch.build_scenes). Writes out/scene_stats.json
({set: {statistic: {n, mean, p10, p50, p90}}}) and out/scene_stats.png (one panel per statistic, a
density histogram per set), each under a temporary name moved into place once complete. An out that is a
file, or that already holds scene_stats.json (unless overwrite), is refused before any set is read
(check_out); a damaged cache raises ValueError naming the file at fault (cache.ScenarioCache).
"""

from __future__ import annotations

import json
import os

import numpy as np

from cp_jax.io import files
from cp_jax.scenarios import stats as stats_lib


def load_set(kind: str, arg, sim, cache_dir: str = "~/.cache/cp_jax/scenes", kinds: tuple[str, ...] = ()):
    """(bank, SimConfig) of one set; raises ValueError naming the set for a bad kind or folder."""
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.scenarios.procedural import layouts

    if kind == "procedural":
        layouts.check_kinds(kinds, "procedural kinds")
        _, bank = bank_lib.cached_procedural_bank(cache_dir, int(arg), 0, 12, sim, kinds=tuple(kinds) or None)
        return bank, sim
    if kind == "cache":
        from cp_jax.scenarios import cache

        if not os.path.isdir(arg):
            raise ValueError(f"scene set {arg!r}: not a folder")
        sc = cache.ScenarioCache(arg)
        return sc.load_bank()[1], sc.cfg
    raise ValueError(f"scene set kind {kind!r}: expected 'procedural' or 'cache'")


def check_out(out: str, overwrite: bool = False) -> None:
    """Refuse (ValueError naming --out) an out that is a file, or that holds scene_stats.json unless overwrite."""
    files.check_out(out, ("scene_stats.json",), overwrite, "scene_stats.json")


def scene_stats(sets: dict[str, tuple], out: str, sim, cache_dir: str = "~/.cache/cp_jax/scenes",
                overwrite: bool = False) -> dict:
    """{set name: summary} for sets {name: (kind, arg[, kinds])} (module docstring); procedural sets are built with
    sim (the policy's SimConfig); writes out's files (check_out first)."""
    check_out(out, overwrite)
    values = {}
    for name, (kind, arg, *kinds) in sets.items():
        bank, cfg = load_set(kind, arg, sim, cache_dir, *kinds)
        values[name] = stats_lib.scene_statistics(bank, cfg)
    summary = {name: stats_lib.summarise(v) for name, v in values.items()}
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, ".scene_stats.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(tmp, os.path.join(out, "scene_stats.json"))
    _figure(values, os.path.join(out, ".scene_stats.tmp.png"))
    os.replace(os.path.join(out, ".scene_stats.tmp.png"), os.path.join(out, "scene_stats.png"))
    return summary


def _figure(values: dict[str, dict[str, np.ndarray]], png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*stats_lib.DRIVER_STATS, *stats_lib.ROAD_STATS]
    cols = 4
    fig, axes = plt.subplots((len(names) + cols - 1) // cols, cols, figsize=(4 * cols, 3 * ((len(names) + 3) // cols)))
    for ax, stat in zip(axes.flat, names, strict=False):
        pooled = np.concatenate([v[stat][np.isfinite(v[stat])] for v in values.values()])
        if pooled.size == 0:
            ax.set_visible(False)
            continue
        bins = np.linspace(np.percentile(pooled, 1), np.percentile(pooled, 99) + 1e-6, 31)
        for set_name, v in values.items():
            x = v[stat][np.isfinite(v[stat])]
            if x.size:
                ax.hist(np.clip(x, bins[0], bins[-1]), bins=bins, density=True, histtype="step", lw=1.5,
                        label=f"{set_name} (n={x.size}, median {np.median(x):.2f})")
        ax.set_title(f"{stat.replace('_', ' ')} ({stats_lib.UNITS[stat]})", fontsize=9)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle("Scene statistics, per set (density; values beyond p1-p99 clipped into the end bins)")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
