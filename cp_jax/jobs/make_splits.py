"""The split job behind `launch.make_splits`: score every eligible (scene, ego) pair and write the
Interactive and Random split manifests.

    scenes = read_scenes("gpudrive_json", src, files=..., procedural_scenes=...)  # read one at a time
    line = write_splits(out, scenes, n=1000, seed=0)

Scenes are read, scored and dropped one at a time: memory holds one scene and the pairs' scores, so
splits are mined over any number of scenes.

cache: every scene of a scenario cache built by launch.build_scenes (src: its folder; any size, read in
order, one scene at a time; scene_id = the cache's, so the manifests serve the benchmark on that cache).
gpudrive_json: every *.json of src (sorted; files='START:STOP' keeps a slice of them), scene_id = the
file stem; a file that fails to read is skipped and listed with its error. procedural: that many
scenes with seeds 0, 1, ... cycling through the layout kinds, scene_id = the scene's name. Writes
all_pairs.csv (every eligible pair, in scene order), interactive.csv (top n by score) and random.csv
(n sampled with seed), each under a temporary name first, all three moved into place once all are complete.
Definitions: cp_jax/scenarios/splits.py.

`check_out(out, overwrite)` refuses (ValueError) an out that is a file, or that already holds manifests
unless overwrite, before any scene is read. write_splits raises NothingRead (a ValueError), writing
nothing, when no scene was read or the scenes read hold no eligible pair.
"""

from __future__ import annotations

import os

import numpy as np

from cp_jax.io import files as io_files
from cp_jax.scenarios import splits

FORMATS = ("gpudrive_json", "procedural", "cache")
MANIFESTS = ("all_pairs.csv", "interactive.csv", "random.csv")


class NothingRead(ValueError):
    """No scene was read, or the scenes read hold no eligible pair: no manifest was written."""


def check_out(out: str, overwrite: bool = False) -> None:
    """Refuse (ValueError naming --out) an out that is not a folder, or that holds manifests unless overwrite."""
    io_files.check_out(out, MANIFESTS, overwrite, "the manifests")


def read_scenes(fmt: str, src: str | None = None, files: str = "", procedural_scenes: int = 50):
    """An iterator of (scene id, RawScene, "") per scene read or (name, None, error) per scene skipped,
    reading one scene at a time; a bad folder or selection raises ValueError here, before any is read."""
    if fmt in ("gpudrive_json", "cache") and not src:
        raise ValueError(f"--src: required with --format={fmt} (the folder of "
                         f"{'scene files' if fmt == 'gpudrive_json' else 'the scenario cache'})")
    if fmt == "gpudrive_json":
        from cp_jax.scenarios.readers.files import scene_files

        return _files(scene_files(src, "*.json", files))
    if fmt == "cache":
        from cp_jax.scenarios.cache import ScenarioCache

        if files:
            raise ValueError("--files selects scene files; --format=cache reads every scene of the cache --src")
        return _cache(ScenarioCache(src))
    if fmt != "procedural":
        raise ValueError(f"--format: unknown {fmt!r}; known: {', '.join(FORMATS)}")
    return _procedural(procedural_scenes)


def _cache(cache):
    from cp_jax.scenarios.builder import unbuild

    for i in range(len(cache)):
        name, scenario = cache[i]
        yield name, unbuild(scenario, name), ""


def _files(paths):
    from cp_jax.scenarios.readers import gpudrive_json

    for path in paths:
        try:
            raw, _ = gpudrive_json.read(path)
        except Exception as e:  # any bad file is reported and skipped
            yield path, None, f"{type(e).__name__}: {e}"
            continue
        yield os.path.splitext(os.path.basename(path))[0], raw, ""


def _procedural(n: int):
    from cp_jax.scenarios.procedural import generator, layouts

    for seed in range(n):
        kind = layouts.LAYOUT_KINDS[seed % len(layouts.LAYOUT_KINDS)]
        try:
            raw = generator.generate(seed, kind)
        except Exception as e:  # a failed scene is reported and skipped
            yield f"{kind}_{seed}", None, f"{type(e).__name__}: {e}"
            continue
        yield raw.name, raw, ""


def write_splits(out: str, scenes, n: int, seed: int) -> str:
    """Score the pairs of every scene of `scenes` (read_scenes' iterator; each skipped one printed), write the
    three manifests into out and return the one-line summary (warnings of short splits are printed).
    Raises NothingRead, writing nothing, when no scene was read or they hold no eligible pair."""
    pairs, read, skipped = [], 0, 0
    for scene_id, raw, error in scenes:
        if raw is None:
            print(f"skipped {scene_id}: {error}")
            skipped += 1
            continue
        pairs += splits.score_scenes([raw], [scene_id])
        read += 1
    if not read:
        raise NothingRead(f"no scene read ({skipped} skipped, the reasons above): no manifest written to {out}")
    if not pairs:
        raise NothingRead(f"no eligible (scene, ego) pair in the {read} scenes read: no manifest written to {out}")
    interactive = splits.interactive_split(pairs, n)
    rand = splits.random_split(pairs, n, seed)
    for split in (interactive, rand):
        if split.warning:
            print(f"warning: {split.warning}")
    os.makedirs(out, exist_ok=True)
    for name, manifest in zip(MANIFESTS, (pairs, interactive, rand), strict=True):
        splits.write_manifest(os.path.join(out, f".{name}.tmp"), manifest)
    for name in MANIFESTS:  # all three complete: moved into place
        os.replace(os.path.join(out, f".{name}.tmp"), os.path.join(out, name))

    def mean(ps):
        return float(np.mean([p.score for p in ps])) if ps else float("nan")

    return (f"scenes read {read}, skipped {skipped}; eligible pairs {len(pairs)}; "
            f"interactive {len(interactive)} mean score {mean(interactive):.4f}; "
            f"random {len(rand)} mean score {mean(rand):.4f} (seed {seed}); "
            f"all mean score {mean(pairs):.4f}; wrote {out}")
