"""The split job behind `launch.make_splits`: score every eligible (scene, ego) pair and write the
Interactive and Random split manifests.

    raws, ids, skipped = read_scenes("gpudrive_json", src, files=..., procedural_scenes=...)
    line = write_splits(out, raws, ids, n=1000, seed=0)

gpudrive_json: every *.json of src (sorted; files='START:STOP' keeps a slice of them), scene_id = the
file stem; a file that fails to read is skipped and listed with its error. procedural: that many
scenes with seeds 0, 1, ... cycling through the layout kinds, scene_id = the scene's name. Writes
all_pairs.csv (every eligible pair, in scene order), interactive.csv (top n by score) and random.csv
(n sampled with seed). Definitions: cp_jax/scenarios/splits.py.
"""

from __future__ import annotations

import os

import numpy as np

from cp_jax.scenarios import splits

FORMATS = ("gpudrive_json", "procedural")


def read_scenes(fmt: str, src: str | None = None, files: str = "", procedural_scenes: int = 50):
    """(raws, scene ids, skipped [(name, error)]); raises ValueError for a bad folder or selection."""
    if fmt == "gpudrive_json":
        from cp_jax.scenarios.readers import gpudrive_json
        from cp_jax.scenarios.readers.files import scene_files

        raws, ids, skipped = [], [], []
        for path in scene_files(src, "*.json", files):
            try:
                raw, _ = gpudrive_json.read(path)
            except Exception as e:  # any bad file is reported and skipped
                skipped.append((path, f"{type(e).__name__}: {e}"))
                continue
            raws.append(raw)
            ids.append(os.path.splitext(os.path.basename(path))[0])
        return raws, ids, skipped
    if fmt != "procedural":
        raise ValueError(f"--format: unknown {fmt!r}; known: {', '.join(FORMATS)}")
    from cp_jax.scenarios.procedural import generator, layouts

    raws, ids, skipped = [], [], []
    for seed in range(procedural_scenes):
        kind = layouts.LAYOUT_KINDS[seed % len(layouts.LAYOUT_KINDS)]
        try:
            raw = generator.generate(seed, kind)
        except Exception as e:  # a failed scene is reported and skipped
            skipped.append((f"{kind}_{seed}", f"{type(e).__name__}: {e}"))
            continue
        raws.append(raw)
        ids.append(raw.name)
    return raws, ids, skipped


def write_splits(out: str, raws, ids, n: int, seed: int, skipped=()) -> str:
    """Score the pairs, write the three manifests into out and return the one-line summary (warnings of
    short splits are printed)."""
    pairs = splits.score_scenes(raws, ids)
    interactive = splits.interactive_split(pairs, n)
    rand = splits.random_split(pairs, n, seed)
    for split in (interactive, rand):
        if split.warning:
            print(f"warning: {split.warning}")
    os.makedirs(out, exist_ok=True)
    splits.write_manifest(os.path.join(out, "all_pairs.csv"), pairs)
    splits.write_manifest(os.path.join(out, "interactive.csv"), interactive)
    splits.write_manifest(os.path.join(out, "random.csv"), rand)

    def mean(ps):
        return float(np.mean([p.score for p in ps])) if ps else float("nan")

    return (f"scenes read {len(raws)}, skipped {len(skipped)}; eligible pairs {len(pairs)}; "
            f"interactive {len(interactive)} mean score {mean(interactive):.4f}; "
            f"random {len(rand)} mean score {mean(rand):.4f} (seed {seed}); "
            f"all mean score {mean(pairs):.4f}; wrote {out}")
