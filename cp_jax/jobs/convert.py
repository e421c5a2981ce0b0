"""The conversion job behind `launch.build_scenes`: a folder of scenes converted once into a scenario
cache (TFDS ArrayRecord of padded arrays) with a report.

    summary = convert(out, cfg, sources(fmt, src, n_procedural, files))
    summary = convert_parallel(out, cfg, Spec(fmt, src, n_procedural, files), shards=16, workers=2)

`convert_parallel` splits the input into shards (contiguous runs of files, or of procedural seeds),
converts each in a worker process into its own cache under out/shards/, and keeps every finished shard:
a killed build started again redoes only the unfinished ones (refused if its settings differ, before
anything is touched). `cache.ScenarioCache(out)` reads the shards as one cache.

Every scene is validated; a malformed file never stops the run: it is skipped and reported (with the
file and the field; an unexpected error while reading or building one scene is reported the same way,
with its type). Scenes larger than the static sizes are truncated by the documented rules
(`builder.fit_to_config`) and counted (truncated_ids: the file's ids of the objects left out).
report.json lists every scene converted or skipped, with the reason and what was dropped, truncated or
coerced; it is written under a temporary name and moved into place once complete.
`summary["converted"] == 0` means the job produced nothing (launch.build_scenes then exits 1).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed

from cp_jax.io import files
from cp_jax.sim import types

FORMATS = ("gpudrive_json", "tfexample", "procedural")
MIN_SEGMENT = 0.1  # m: the shortest --max_segment (finer cuts only multiply the segments)


@dataclasses.dataclass(frozen=True)
class Procedural:
    """How --format=procedural draws its scenes: scene i is generator.generate(seed + i, kinds[i % len(kinds)],
    agents) (kinds empty: layouts.LAYOUT_KINDS), capped at max_objects objects and max_road_segments segments
    (None: uncapped; build_scenes passes its SimConfig's, as the training banks do)."""
    seed: int = 0
    agents: int = 12
    kinds: tuple[str, ...] = ()
    max_objects: int | None = None
    max_road_segments: int | None = None


def sources(fmt: str, src: str | None, n_procedural: int, select: str = "",
            max_segment: float | None = None, procedural: Procedural = Procedural(),
            part: tuple[int, int] = (0, 1)) -> list[tuple[str, Callable]]:
    """(scene id, thunk returning (RawScene, notes dict)) for every input scene; select: 'START:STOP' of
    the sorted files of src; max_segment: the longest road segment a reader emits (m; None: the
    readers' 10 m); part (k, n): only shard k of n (contiguous runs of the files, or of the procedural
    scenes). Raises ValueError for a bad selection, folder or length, or a procedural count below its
    minimum (before anything is read)."""
    if fmt not in FORMATS:
        raise ValueError(f"--format: unknown {fmt!r}; known: {', '.join(FORMATS)}")
    if max_segment is not None and not max_segment >= MIN_SEGMENT:
        raise ValueError(f"--max_segment must be >= {MIN_SEGMENT} m, got {max_segment}")
    if fmt == "procedural":
        from cp_jax.scenarios.procedural import layouts

        layouts.check_kinds(procedural.kinds, "--kinds")
        for flag, value, least in (("--procedural_scenes", n_procedural, 1), ("--agents", procedural.agents, 1),
                                   ("--seed", procedural.seed, 0)):
            if value < least:  # 0 scenes or agents converted nothing; a negative seed failed every scene
                raise ValueError(f"{flag}={value}: must be >= {least}")
    return list(_sources(fmt, src, n_procedural, select, max_segment, procedural, part))


def _part(n: int, part: tuple[int, int]) -> slice:
    """Shard k of n_shards of n items: a contiguous run, sizes differing by at most one."""
    k, n_shards = part
    return slice(k * n // n_shards, (k + 1) * n // n_shards)


def reading_options(fmt: str, max_segment: float | None) -> dict:
    """The reading settings a cache of `fmt` is built with, as report.json records them: the road segment
    length the readers use (max_segment, None: their default); none for procedural scenes."""
    from cp_jax.scenarios.readers import common

    return {} if fmt == "procedural" else dict(max_segment=common.MAX_SEGMENT if max_segment is None else max_segment)


def _sources(fmt: str, src: str | None, n_procedural: int, select: str, max_segment: float | None,
             proc: Procedural, part: tuple[int, int]) -> Iterator[tuple[str, Callable]]:
    seg = reading_options(fmt, max_segment).get("max_segment")
    if fmt == "procedural":
        if select:
            raise ValueError("--files selects files of --src; --format=procedural has none (use --procedural_scenes)")
        if max_segment is not None:
            raise ValueError("--max_segment splits the roads of scene files; --format=procedural draws its own")
        from cp_jax.scenarios.procedural import generator, layouts

        kinds = proc.kinds or layouts.LAYOUT_KINDS
        for i in range(n_procedural)[_part(n_procedural, part)]:
            kind = kinds[i % len(kinds)]
            yield f"procedural_{kind}_{proc.seed + i}", lambda i=i, kind=kind: (generator.generate(
                proc.seed + i, kind, proc.agents, max_objects=proc.max_objects,
                max_road_segments=proc.max_road_segments), {})
        return
    from cp_jax.scenarios.readers.files import scene_files

    def files(pattern):
        chosen = scene_files(src, pattern, select)
        return chosen[_part(len(chosen), part)]

    if fmt == "gpudrive_json":
        from cp_jax.scenarios.readers import gpudrive_json

        for path in files("*.json"):
            def read(path=path):
                raw, notes = gpudrive_json.read(path, max_segment=seg)
                return raw, notes.as_dict()
            yield os.path.splitext(os.path.basename(path))[0], read
        return
    from cp_jax.scenarios.builder import SceneError
    from cp_jax.scenarios.readers import tfexample

    for path in files("*tfrecord*"):
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
    files.write_json(os.path.join(out, "report.json"),
                     dict(summary=summary, sim_config=cfg.__dict__, options=options or {}, scenes=report), indent=2)
    return summary


@dataclasses.dataclass(frozen=True)
class Spec:
    """The input of a conversion, in a form a worker process can take (sources' arguments)."""
    fmt: str
    src: str | None
    n_procedural: int = 0
    select: str = ""
    max_segment: float | None = None
    procedural: Procedural = Procedural()

    def sources(self, part: tuple[int, int] = (0, 1)) -> list[tuple[str, Callable]]:
        return sources(self.fmt, self.src, self.n_procedural, self.select, self.max_segment, self.procedural, part)


SHARDS = "shards"  # out/shards/<k>-of-<n>/: one finished cache per shard (its report.json marks it done)


def _shard_dir(out: str, k: int, n: int) -> str:
    return os.path.join(out, SHARDS, f"{k:05d}-of-{n:05d}")


def _convert_shard(out: str, cfg: types.SimConfig, spec: Spec, k: int, n: int) -> dict:
    """Worker: shard k of n converted into its own folder (a leftover of a killed attempt removed first)."""
    folder = _shard_dir(out, k, n)
    shutil.rmtree(folder, ignore_errors=True)
    summary = convert(folder, cfg, spec.sources((k, n)), reading_options(spec.fmt, spec.max_segment),
                      log=lambda line: print(line, file=sys.stderr, flush=True))
    import jax

    # The procedural generator compiles its IDM run per scene size; without this a worker grew from 0.9 to
    # 1.7 GB within one shard (session 32: an allocation failure after 30 of 40 shards; data_scale.md).
    jax.clear_caches()
    return dict(shard=k, **{key: summary[key] for key in ("converted", "skipped", "seconds")})


def convert_parallel(out: str, cfg: types.SimConfig, spec: Spec, shards: int, workers: int,
                     log: Callable[[str], None] | None = None) -> dict:
    """Convert spec's scenes in `shards` shards over `workers` processes into out/shards/, keeping every
    finished shard of an earlier, killed attempt; then write out/report.json (every scene, the build rate)
    and out/sim_config.json (the mark of a finished cache). log is told each finished shard. Refuses, before
    anything is written, an out that holds a finished cache or a started build with other settings."""
    if shards < 1 or workers < 1:
        raise ValueError(f"--shards and --workers must be >= 1, got {shards} and {workers}")
    if os.path.exists(os.path.join(out, "sim_config.json")):
        raise ValueError(f"--out={out} already holds a scenario cache: remove it or choose another folder")
    spec.sources((0, shards))  # a bad folder, selection or kind is refused here, before anything is written
    settings = dict(spec=dataclasses.asdict(spec), sim_config=dataclasses.asdict(cfg), shards=shards)
    settings = json.loads(json.dumps(settings))  # tuples as lists, as the file stores them
    path = os.path.join(out, "build.json")
    if os.path.exists(path):
        with open(path) as f:
            before = json.load(f)
        if before != settings:
            changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
            raise ValueError(f"--out={out} holds a build started with other settings ({', '.join(changed)} "
                             "differ): start it again with the same flags, or choose another folder")
    elif os.path.exists(out) and os.listdir(out):
        raise ValueError(f"--out={out} is not empty and holds no build of launch.build_scenes")
    os.makedirs(os.path.join(out, SHARDS), exist_ok=True)
    files.write_json(path, settings, indent=2)

    done = [k for k in range(shards) if os.path.exists(os.path.join(_shard_dir(out, k, shards), "report.json"))]
    todo = [k for k in range(shards) if k not in done]
    if done and log is not None:
        log(f"{len(done)} of {shards} shards kept from an earlier run")
    t0 = time.perf_counter()
    # spawn: every worker starts its own JAX (forking a process that has started JAX's threads can hang)
    with ProcessPoolExecutor(max_workers=min(workers, max(len(todo), 1)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_convert_shard, out, cfg, spec, k, shards) for k in todo]
        for i, fut in enumerate(as_completed(futures)):
            r = fut.result()
            if log is not None:
                log(f"shard {r['shard'] + 1} of {shards}: {r['converted']} converted, {r['skipped']} skipped "
                    f"({i + 1 + len(done)} of {shards} done)")
    elapsed = time.perf_counter() - t0

    reports = []
    for k in range(shards):
        with open(os.path.join(_shard_dir(out, k, shards), "report.json")) as f:
            reports.append(json.load(f))
    scenes = [s for r in reports for s in r["scenes"]]
    converted = [s for s in scenes if s["status"] == "converted"]
    built_now = sum(len(reports[k]["scenes"]) for k in todo)
    summary = dict(converted=len(converted), skipped=len(scenes) - len(converted), seconds=elapsed,
                   scenes_per_s=built_now / max(elapsed, 1e-9), workers=workers, shards=shards,
                   shards_kept=len(done), scenes_per_s_per_worker=built_now / max(elapsed, 1e-9) / workers,
                   data_dir=os.path.join(out, SHARDS),
                   truncated_objects=sum(s["truncated_objects"] for s in converted),
                   truncated_segments=sum(s["truncated_segments"] for s in converted))
    files.write_json(os.path.join(out, "report.json"),
                     dict(summary=summary, sim_config=cfg.__dict__, options=reports[0]["options"], scenes=scenes),
                     indent=2)
    if converted:
        from cp_jax.scenarios import cache

        cache.mark_complete(out, cfg)
    return summary
