"""Convert a folder of scenes once into a scenario cache (TFDS ArrayRecord, padded arrays).

    python -m launch.build_scenes --src=DIR --format=gpudrive_json|tfexample|procedural --out=DIR
    python -m launch.build_scenes --src=../shared/data/womd_json --files=0:10 --out=DIR   # the first ten files

Every scene is validated; a malformed file never stops the run: it is skipped and reported.
Scenes larger than the static sizes are truncated by the documented rules (builder.fit_to_config)
and counted. Ends with a one-line summary and writes report.json (every scene converted or
skipped, with the reason and what was dropped or truncated).
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags

flags.DEFINE_string("src", None, "folder of scene files (unused for --format=procedural)")
flags.DEFINE_enum("format", "gpudrive_json", ["gpudrive_json", "tfexample", "procedural"], "input format")
flags.DEFINE_string("out", None, "output folder (the cache and report.json)")
flags.DEFINE_integer("procedural_scenes", 64, "scenes to generate for --format=procedural")
flags.DEFINE_integer("max_agents", 128, "static object slots")
flags.DEFINE_integer("max_road_segments", 4096, "static road segment slots")
flags.DEFINE_integer("max_lanes", 512, "static lane slots")
flags.DEFINE_integer("log_steps", 91, "log steps every scene must have (shorter logs are skipped)")
flags.DEFINE_string("files", "", "START:STOP: only these of --src's files, sorted by name (e.g. 0:10; '' = all)")
FLAGS = flags.FLAGS


def _sources(fmt: str, src: str | None, n_procedural: int, select: str = ""):
    """Yields (scene id, thunk returning (RawScene, notes dict)) for every input scene; select:
    'START:STOP' of the sorted files of src."""
    if fmt == "procedural":
        from cp_jax.scenarios.procedural import generator, layouts

        kinds = layouts.LAYOUT_KINDS
        for i in range(n_procedural):
            yield f"procedural_{kinds[i % len(kinds)]}_{i}", lambda i=i: (
                generator.generate(i, kinds[i % len(kinds)]), {})
        return
    from cp_jax.scenarios.readers.files import scene_files

    if fmt == "gpudrive_json":
        from cp_jax.scenarios.readers import gpudrive_json

        for path in scene_files(src, "*.json", select):
            def read(path=path):
                raw, notes = gpudrive_json.read(path)
                return raw, notes.as_dict()
            yield os.path.splitext(os.path.basename(path))[0], read
    else:
        from cp_jax.scenarios.builder import SceneError
        from cp_jax.scenarios.readers import tfexample

        for path in scene_files(src, "*tfrecord*", select):
            try:
                items = tfexample.read(path)
            except SceneError as e:  # an unreadable file is reported, not fatal
                items = [e]
            for k, item in enumerate(items):
                def read(item=item):
                    if isinstance(item, Exception):
                        raise item
                    raw, notes = item
                    return raw, notes.as_dict()
                yield f"{os.path.basename(path)}#{k}", read


def main(_):
    from cp_jax.scenarios import cache
    from cp_jax.scenarios.builder import SceneError, build_scenario, fit_to_config
    from cp_jax.sim import types

    cfg = types.SimConfig(max_agents=FLAGS.max_agents, max_road_segments=FLAGS.max_road_segments,
                          max_lanes=FLAGS.max_lanes, log_steps=FLAGS.log_steps,
                          episode_steps=FLAGS.log_steps - 1)
    if os.path.exists(os.path.join(FLAGS.out, "sim_config.json")):
        raise SystemExit(f"--out={FLAGS.out} already holds a scenario cache: remove it or choose another folder")
    if FLAGS.files and FLAGS.format == "procedural":
        raise app.UsageError("--files selects files of --src; --format=procedural has none (use --procedural_scenes)")
    try:  # the input is checked before anything is written
        sources = list(_sources(FLAGS.format, FLAGS.src, FLAGS.procedural_scenes, FLAGS.files))
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    os.makedirs(FLAGS.out, exist_ok=True)
    report, t0 = [], time.perf_counter()

    def examples():
        for scene_id, read in sources:
            entry = dict(scene=scene_id)
            try:
                raw, notes = read()
                raw, dropped_objects, dropped_segments = fit_to_config(raw, cfg)
                scenario = build_scenario(raw, cfg)
            except SceneError as e:  # readers turn malformed input into SceneError naming the field
                entry.update(status="skipped", reason=str(e))
                report.append(entry)
                continue
            entry.update(status="converted", objects=raw.num_objects,
                         controllable=int(raw.controllable.sum()), truncated_objects=dropped_objects,
                         truncated_segments=dropped_segments, **notes)
            report.append(entry)
            yield scene_id, scenario

    data_dir = None
    try:  # scenes stream into the cache as they convert
        data_dir = cache.build_cache(FLAGS.out, cfg, examples)
    except AssertionError:  # TFDS refuses an empty split: every scene was skipped (reported below)
        if any(r["status"] == "converted" for r in report):
            raise
    elapsed = time.perf_counter() - t0
    converted = [r for r in report if r["status"] == "converted"]
    skipped = [r for r in report if r["status"] == "skipped"]
    summary = dict(converted=len(converted), skipped=len(skipped), seconds=elapsed,
                   scenes_per_s=len(report) / max(elapsed, 1e-9), data_dir=data_dir,
                   truncated_objects=sum(r["truncated_objects"] for r in converted),
                   truncated_segments=sum(r["truncated_segments"] for r in converted))
    with open(os.path.join(FLAGS.out, "report.json"), "w") as f:
        json.dump(dict(summary=summary, sim_config=cfg.__dict__, scenes=report), f, indent=2)
    print(f"{len(converted)} scenes converted, {len(skipped)} skipped, "
          f"{summary['truncated_objects']} objects and {summary['truncated_segments']} road segments truncated, "
          f"{summary['scenes_per_s']:.1f} scenes/s -> {FLAGS.out} (report.json)")


if __name__ == "__main__":
    flags.mark_flags_as_required(["out"])
    app.run(main)
