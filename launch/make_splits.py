"""Score every eligible (scene, ego) pair and write the Interactive and Random split manifests.

    python -m launch.make_splits --src=DIR --format=gpudrive_json --n=1000 --seed=0 --out=DIR
    python -m launch.make_splits --format=procedural --procedural_scenes=50 --n=1000 --seed=0 --out=DIR

gpudrive_json: every *.json in --src (sorted; --files=START:STOP keeps a slice of them, e.g. 10: for
the scenes a training cache built with --files=0:10 left out), scene_id = file stem; a file that fails to read is
skipped and listed with its error. procedural: --procedural_scenes scenes with seeds 0, 1, ...
cycling through the layout kinds, scene_id = the scene's name (--src is ignored).

Writes all_pairs.csv (every eligible pair, in scene order), interactive.csv (top --n by score) and
random.csv (--n sampled with --seed) into --out, and prints one summary line. Definitions:
cp_jax/scenarios/splits.py.
"""

from __future__ import annotations

import os

from absl import app, flags

flags.DEFINE_string("src", None, "directory of scene files (gpudrive_json)")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json", "procedural"], "scene source")
flags.DEFINE_integer("n", 1000, "pairs per split", lower_bound=0)
flags.DEFINE_integer("seed", 0, "seed of the random split")
flags.DEFINE_string("out", None, "output directory")
flags.DEFINE_integer("procedural_scenes", 50, "scenes to generate (procedural)", lower_bound=1)
flags.DEFINE_string("files", "", "START:STOP: only these of --src's files, sorted by name (e.g. 10:; '' = all)")
flags.mark_flag_as_required("out")
FLAGS = flags.FLAGS


def _read_json_scenes(src: str, select: str = ""):
    from cp_jax.scenarios.readers import gpudrive_json
    from cp_jax.scenarios.readers.files import scene_files

    try:
        files = scene_files(src, "*.json", select)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    raws, ids, skipped = [], [], []
    for path in files:
        try:
            raw, _ = gpudrive_json.read(path)
        except Exception as e:  # any bad file is reported and skipped
            skipped.append((path, f"{type(e).__name__}: {e}"))
            continue
        raws.append(raw)
        ids.append(os.path.splitext(os.path.basename(path))[0])
    return raws, ids, skipped


def _procedural_scenes(count: int):
    from cp_jax.scenarios.procedural import generator, layouts

    raws, ids, skipped = [], [], []
    for seed in range(count):
        kind = layouts.LAYOUT_KINDS[seed % len(layouts.LAYOUT_KINDS)]
        try:
            raw = generator.generate(seed, kind)
        except Exception as e:  # a failed scene is reported and skipped
            skipped.append((f"{kind}_{seed}", f"{type(e).__name__}: {e}"))
            continue
        raws.append(raw)
        ids.append(raw.name)
    return raws, ids, skipped


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import numpy as np

    from cp_jax.scenarios import splits

    if FLAGS.format == "gpudrive_json":
        raws, ids, skipped = _read_json_scenes(FLAGS.src, FLAGS.files)
    else:
        raws, ids, skipped = _procedural_scenes(FLAGS.procedural_scenes)
    for name, err in skipped:
        print(f"skipped {name}: {err}")

    pairs = splits.score_scenes(raws, ids)
    interactive = splits.interactive_split(pairs, FLAGS.n)
    rand = splits.random_split(pairs, FLAGS.n, FLAGS.seed)
    for split in (interactive, rand):
        if split.warning:
            print(f"warning: {split.warning}")
    os.makedirs(FLAGS.out, exist_ok=True)
    splits.write_manifest(os.path.join(FLAGS.out, "all_pairs.csv"), pairs)
    splits.write_manifest(os.path.join(FLAGS.out, "interactive.csv"), interactive)
    splits.write_manifest(os.path.join(FLAGS.out, "random.csv"), rand)

    def mean(ps):
        return float(np.mean([p.score for p in ps])) if ps else float("nan")

    print(
        f"scenes read {len(raws)}, skipped {len(skipped)}; eligible pairs {len(pairs)}; "
        f"interactive {len(interactive)} mean score {mean(interactive):.4f}; "
        f"random {len(rand)} mean score {mean(rand):.4f} (seed {FLAGS.seed}); "
        f"all mean score {mean(pairs):.4f}; wrote {FLAGS.out}"
    )


if __name__ == "__main__":
    app.run(main)
