"""The conversion job behind `launch.build_scenes`: a folder of scenes converted once into a scenario
cache (TFDS ArrayRecord of padded arrays) with a report.

    summary = convert(out, cfg, sources(fmt, src, n_procedural, files))

Every scene is validated; a malformed file never stops the run: it is skipped and reported (with the
file and the field; an unexpected error while reading or building one scene is reported the same way,
with its type). Scenes larger than the static sizes are truncated by the documented rules
(`builder.fit_to_config`) and counted (truncated_ids: the file's ids of the objects left out).
report.json lists every scene converted or skipped, with the reason and what was dropped, truncated or
coerced; it is written under a temporary name and moved into place once complete.
`summary["converted"] == 0` means the job produced nothing (launch.build_scenes then exits 1).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator

from cp_jax.sim import types

FORMATS = ("gpudrive_json", "tfexample", "procedural")
MIN_SEGMENT = 0.1  # m: the shortest --max_segment (finer cuts only multiply the segments)


def sources(fmt: str, src: str | None, n_procedural: int, select: str = "",
            max_segment: float | None = None) -> list[tuple[str, Callable]]:
    """(scene id, thunk returning (RawScene, notes dict)) for every input scene; select: 'START:STOP' of
    the sorted files of src; max_segment: the longest road segment a reader emits (m; None: the
    readers' 10 m). Raises ValueError for a bad selection, folder or length (before anything is read)."""
    if fmt not in FORMATS:
        raise ValueError(f"--format: unknown {fmt!r}; known: {', '.join(FORMATS)}")
    if max_segment is not None and not max_segment >= MIN_SEGMENT:
        raise ValueError(f"--max_segment must be >= {MIN_SEGMENT} m, got {max_segment}")
    return list(_sources(fmt, src, n_procedural, select, max_segment))


def reading_options(fmt: str, max_segment: float | None) -> dict:
    """The reading settings a cache of `fmt` is built with, as report.json records them: the road segment
    length the readers use (max_segment, None: their default); none for procedural scenes."""
    from cp_jax.scenarios.readers import common

    return {} if fmt == "procedural" else dict(max_segment=common.MAX_SEGMENT if max_segment is None else max_segment)


def _sources(fmt: str, src: str | None, n_procedural: int, select: str,
             max_segment: float | None) -> Iterator[tuple[str, Callable]]:
    seg = reading_options(fmt, max_segment).get("max_segment")
    if fmt == "procedural":
        if select:
            raise ValueError("--files selects files of --src; --format=procedural has none (use --procedural_scenes)")
        if max_segment is not None:
            raise ValueError("--max_segment splits the roads of scene files; --format=procedural draws its own")
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
                raw, notes = gpudrive_json.read(path, max_segment=seg)
                return raw, notes.as_dict()
            yield os.path.splitext(os.path.basename(path))[0], read
        return
    from cp_jax.scenarios.builder import SceneError
    from cp_jax.scenarios.readers import tfexample

    for path in scene_files(src, "*tfrecord*", select):
        try:
            items = tfexample.read(path, max_segment=seg)
        except ImportError:  # no TensorFlow: no file can be read
            raise
        except Exception as e:  # an unreadable file is reported, not fatal
            items = [e if isinstance(e, SceneError) else SceneError(f"{path}: unexpected {type(e).__name__}: {e}")]
        for k, item in enumerate(items):
            def read(item=item):
                if isinstance(item, Exception):
                    raise item
                raw, notes = item
                return raw, notes.as_dict()
            yield f"{os.path.basename(path)}#{k}", read


def convert(out: str, cfg: types.SimConfig, scenes: list[tuple[str, Callable]], options: dict | None = None,
            log: Callable[[str], None] | None = None) -> dict:
    """Convert `scenes` (from `sources`) into a cache in out and write out/report.json (with options, the
    reading settings, e.g. max_segment); log (if given) is told each skipped scene and its reason; returns
    the summary. Refuses a folder that already holds a cache."""
    from cp_jax.scenarios import cache
    from cp_jax.scenarios.builder import SceneError, build_scenario, fit_to_config, object_ids

    if os.path.exists(os.path.join(out, "sim_config.json")):
        raise ValueError(f"--out={out} already holds a scenario cache: remove it or choose another folder")
    os.makedirs(out, exist_ok=True)
    report, t0 = [], time.perf_counter()

    def examples():
        for scene_id, read in scenes:
            entry = dict(scene=scene_id)
            try:
                raw, notes = read()
                ids_read = object_ids(raw)
                raw, dropped_objects, dropped_segments = fit_to_config(raw, cfg)
                scenario = build_scenario(raw, cfg)
            except Exception as e:  # one scene never stops the others: every reason is reported
                # Readers turn malformed input into SceneError naming the field; anything else is named by type.
                reason = str(e) if isinstance(e, SceneError) else f"{scene_id}: unexpected {type(e).__name__}: {e}"
                entry.update(status="skipped", reason=reason)
                report.append(entry)
                if log is not None:
                    log(f"skip {scene_id}: {reason}")
                continue
            kept = set(object_ids(raw).tolist())
            entry.update(status="converted", objects=raw.num_objects,
                         controllable=int(raw.controllable.sum()), truncated_objects=dropped_objects,
                         truncated_ids=[int(i) for i in ids_read if i not in kept],
                         truncated_segments=dropped_segments, **notes)
            report.append(entry)
            yield scene_id, scenario

    data_dir = None
    try:  # scenes stream into the cache as they convert
        data_dir = cache.build_cache(out, cfg, examples)
    except AssertionError:  # TFDS refuses an empty split: every scene was skipped (reported below)
        if any(r["status"] == "converted" for r in report):
            raise
    elapsed = time.perf_counter() - t0
    converted = [r for r in report if r["status"] == "converted"]
    summary = dict(converted=len(converted), skipped=len(report) - len(converted), seconds=elapsed,
                   scenes_per_s=len(report) / max(elapsed, 1e-9), data_dir=data_dir,
                   truncated_objects=sum(r["truncated_objects"] for r in converted),
                   truncated_segments=sum(r["truncated_segments"] for r in converted))
    path = os.path.join(out, "report.json")
    with open(path + ".tmp", "w") as f:
        json.dump(dict(summary=summary, sim_config=cfg.__dict__, options=options or {}, scenes=report), f, indent=2)
    os.replace(path + ".tmp", path)
    return summary
