"""Scenario cache: scenes converted once into padded arrays, stored as a TFDS ArrayRecord dataset.

Building and reading need tensorflow-datasets and array-record, not TensorFlow. Each record is one
`Scenario` (every leaf a fixed-shape tensor for the dataset's SimConfig) plus its scene id; the
SimConfig is part of the builder config, so a cache is only read back with the sizes it was built
for. Random access by index (`ScenarioCache[i]`, `load_bank(...)`). A damaged cache (a corrupt
sim_config.json or names.json, no dataset_info.json, a record file missing, truncated or corrupt) raises
ValueError naming the cache folder and the file at fault.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow_datasets as tfds

from cp_jax.io import files
from cp_jax.sim.types import Scenario, SimConfig

CACHE_VERSION = "1.0.0"


def scenario_spec(cfg: SimConfig) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes and dtypes of every Scenario leaf for cfg (traced, nothing is computed)."""
    a, s, l_, t, r = cfg.max_agents, cfg.max_road_segments, cfg.max_lanes, cfg.log_steps, cfg.max_route_points
    g2 = cfg.num_cells
    f32, i32, b = np.float32, np.int32, np.bool_
    shapes = dict(
        road_xy0=((s, 2), f32), road_xy1=((s, 2), f32), road_tan0=((s, 2), f32), road_tan1=((s, 2), f32),
        road_type=((s,), i32), road_lane=((s,), i32), road_valid=((s,), b), road_feat=((s, 6), f32),
        lane_succ=((l_, cfg.max_lane_successors), i32), lane_left=((l_,), i32), lane_right=((l_,), i32),
        lane_valid=((l_,), b), tl_state=((l_, t), i32),
        log_xy=((a, t, 2), f32), log_yaw=((a, t), f32), log_vel=((a, t, 2), f32), log_valid=((a, t), b),
        size=((a, 2), f32), obj_type=((a,), i32), agent_valid=((a,), b), controllable=((a,), b),
        goal=((a, 2), f32), sdc=((), i32),
        route_xy=((a, r, 2), f32), route_lane=((a, r), i32), route_len=((a,), i32), priority=((a,), i32),
        grid_origin=((2,), f32), grid_cell=((), f32),
        cell_edges=((g2, cfg.cell_edges), i32), cell_lanes=((g2, cfg.cell_lanes), i32),
        cell_road=((g2, cfg.obs_road), i32),
    )
    missing = {f.name for f in dataclasses.fields(Scenario)} - set(shapes)
    if missing:
        raise RuntimeError(f"scenario_spec is missing Scenario fields {sorted(missing)}")
    return {k: jax.ShapeDtypeStruct(shape, dtype) for k, (shape, dtype) in shapes.items()}


@dataclasses.dataclass
class CacheConfig(tfds.core.BuilderConfig):
    sim: dict = dataclasses.field(default_factory=dict)  # SimConfig fields


class ScenarioCacheBuilder(tfds.core.GeneratorBasedBuilder):
    """TFDS builder of a scenario cache; scenes come from a generator function set at build time."""

    VERSION = tfds.core.Version(CACHE_VERSION)
    BUILDER_CONFIGS = [CacheConfig(name="default")]
    _examples: Callable[[], Iterable[tuple[str, Scenario]]] | None = None

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = SimConfig(**self.builder_config.sim)
        features = {
            k: tfds.features.Tensor(shape=v.shape, dtype=np.dtype(v.dtype), encoding="zlib")
            for k, v in scenario_spec(cfg).items()
        }
        features["scene_id"] = tfds.features.Text()
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(features),
            description="cp_jax scenario cache: padded Scenario arrays, one record per scene.",
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        if self._examples is None:
            raise RuntimeError("ScenarioCacheBuilder needs its scenes: use build_cache()")
        for scene_id, scenario in self._examples():
            leaves = {k: np.asarray(v) for k, v in dataclasses.asdict(scenario).items()}
            leaves["scene_id"] = scene_id
            yield scene_id, leaves


def _builder(out_dir: str, cfg: SimConfig, name: str | None = None) -> ScenarioCacheBuilder:
    sim = dataclasses.asdict(cfg)
    digest = hashlib.sha1(json.dumps(sim, sort_keys=True).encode()).hexdigest()[:8]  # every field counts
    name = name or f"a{cfg.max_agents}_s{cfg.max_road_segments}_l{cfg.max_lanes}_t{cfg.log_steps}_{digest}"
    config = CacheConfig(name=name, sim=sim)
    return ScenarioCacheBuilder(data_dir=out_dir, config=config, file_format="array_record")


def build_cache(out_dir: str, cfg: SimConfig, examples: Callable[[], Iterable[tuple[str, Scenario]]]) -> str:
    """Write the scenes yielded by examples() into out_dir; returns the dataset folder.

    Refuses an out_dir that already holds a cache (TFDS would silently keep the old one)."""
    if os.path.exists(os.path.join(out_dir, "sim_config.json")):
        raise FileExistsError(f"{out_dir} already holds a scenario cache: remove it or choose another folder")
    builder = _builder(out_dir, cfg)
    builder._examples = examples
    # TFDS prints "Downloading and preparing dataset ..." and its own progress bars: not our job's lines.
    tfds.display_progress_bar(False)
    with contextlib.redirect_stdout(io.StringIO()):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    source = builder.as_data_source(split="train")  # the scene ids in record order (TFDS orders by key)
    files.write_json(os.path.join(out_dir, NAMES), [_text(source[i]["scene_id"]) for i in range(len(source))])
    mark_complete(out_dir, cfg)
    return builder.data_dir


def mark_complete(out_dir: str, cfg: SimConfig) -> None:
    """Write out_dir/sim_config.json, the mark of a finished cache (whole or sharded), last of its files."""
    files.write_json(os.path.join(out_dir, "sim_config.json"), dataclasses.asdict(cfg), indent=2)


NAMES = "names.json"  # the scene ids in record order, written with the cache


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


DAMAGED = "(the cache {out_dir} is damaged: rebuild it with launch.build_scenes)"


def _read_json(path: str, out_dir: str):
    """The JSON value of path, a file of the cache out_dir; ValueError naming both when it does not parse."""
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}) {DAMAGED.format(out_dir=out_dir)}") from None


def read_sim_config(out_dir: str) -> SimConfig:
    """The SimConfig a cache was built with (out_dir/sim_config.json). FileNotFoundError when out_dir is not a
    cache; ValueError naming the file (and field) when the file is damaged."""
    path = os.path.join(out_dir, "sim_config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{out_dir}: no sim_config.json (not a cache built by launch.build_scenes)")
    fields = _read_json(path, out_dir)
    if not isinstance(fields, dict):
        raise ValueError(f"{path}: expected an object of SimConfig fields, got {type(fields).__name__} "
                         + DAMAGED.format(out_dir=out_dir))
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(SimConfig)})
    if unknown:
        raise ValueError(f"{path}: unknown SimConfig fields {unknown} {DAMAGED.format(out_dir=out_dir)}")
    try:
        return SimConfig(**fields)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e} {DAMAGED.format(out_dir=out_dir)}") from None


def _check_records(shards: list[tuple[str, int]], out_dir: str) -> list[str]:
    """The record files of shards [(file, records dataset_info.json expects)], each checked to exist and hold
    that many records (a truncated file holds fewer); ValueError naming the file otherwise."""
    from array_record.python import array_record_module

    for path, expected in shards:
        if not os.path.isfile(path):
            raise ValueError(f"{path}: missing {DAMAGED.format(out_dir=out_dir)}")
        try:
            reader = array_record_module.ArrayRecordReader(path)
            ok, held = reader.ok(), reader.num_records()
        except Exception as e:  # array_record raises RuntimeError / ValueError for a file it cannot open
            raise ValueError(f"{path}: unreadable ({type(e).__name__}: {e}) {DAMAGED.format(out_dir=out_dir)}") from e
        with contextlib.suppress(Exception):  # closing a reader that failed raises (an empty RuntimeError)
            reader.close()
        if not ok:  # its footer (the record index) is gone: a truncated or overwritten file
            raise ValueError(f"{path}: unreadable (truncated or corrupt: no record index) "
                             + DAMAGED.format(out_dir=out_dir))
        if held != expected:
            raise ValueError(f"{path}: holds {held} records, dataset_info.json expects {expected} (truncated?) "
                             + DAMAGED.format(out_dir=out_dir))
    return [path for path, _ in shards]


class ScenarioCache(Sequence):
    """Random access to a built cache: cache[i] -> (scene_id, Scenario of numpy arrays). A cache built in
    shards (out_dir/shards/*, `launch.build_scenes --workers`) reads as one, shard after shard."""

    def __init__(self, out_dir: str):
        self.cfg = read_sim_config(out_dir)
        self.out_dir, self._names = out_dir, None
        shards = os.path.join(out_dir, "shards")
        if os.path.isdir(shards):  # shards that converted nothing hold no dataset (no sim_config.json)
            self._parts = [ScenarioCache(os.path.join(shards, d)) for d in sorted(os.listdir(shards))
                           if os.path.exists(os.path.join(shards, d, "sim_config.json"))]
            for part in self._parts:
                if part.cfg != self.cfg:
                    raise ValueError(f"{out_dir}: a shard was built with other sizes than sim_config.json's")
            self._starts = np.cumsum([0] + [len(p) for p in self._parts])
            return
        self._parts = None
        # The dataset folder is named by a hash of every SimConfig field at build time; a cache built
        # before a field was added to SimConfig (with its default) is found by its folder instead.
        datasets = os.path.join(out_dir, ScenarioCacheBuilder.name)
        built = sorted(d for d in os.listdir(datasets) if not d.startswith(".")) if os.path.isdir(datasets) else []
        if len(built) != 1:
            raise FileNotFoundError(f"{out_dir}: expected one dataset folder under {ScenarioCacheBuilder.name}/, "
                                    f"found {built} (rebuild it with launch.build_scenes)")
        info = os.path.join(datasets, built[0], CACHE_VERSION, "dataset_info.json")
        if not os.path.isfile(info):
            raise ValueError(f"{info}: missing {DAMAGED.format(out_dir=out_dir)}")
        try:
            self._source = _builder(out_dir, self.cfg, built[0]).as_data_source(split="train")
            shards = [(f.filename, f.take) for f in self._source.dataset_info.splits["train"].file_instructions]
        except Exception as e:  # TFDS raises KeyError, RuntimeError, ... for a dataset_info.json it cannot use
            raise ValueError(f"{info}: unreadable ({type(e).__name__}: {e}) {DAMAGED.format(out_dir=out_dir)}") from e
        self._files = _check_records(shards, out_dir)
        self._file_starts = np.cumsum([0] + [take for _, take in shards])

    def __len__(self) -> int:
        return int(self._starts[-1]) if self._parts is not None else len(self._source)

    def __getitem__(self, i):
        if self._parts is not None:
            if not -len(self) <= i < len(self):
                raise IndexError(f"scene {i} of a cache of {len(self)}")
            i = i % len(self)
            k = int(np.searchsorted(self._starts, i, side="right")) - 1
            return self._parts[k][i - int(self._starts[k])]
        try:
            rec = self._source[i]
            scene_id = _text(rec.pop("scene_id"))
            return scene_id, Scenario(**{k: np.asarray(v) for k, v in rec.items()})
        except IndexError:
            raise
        except Exception as e:  # a damaged record: name its file
            j = i % len(self) if -len(self) <= i < len(self) else i
            k = max(int(np.searchsorted(self._file_starts, j, side="right")) - 1, 0)
            raise ValueError(f"{self._files[min(k, len(self._files) - 1)]}: record {j - int(self._file_starts[k])} "
                             f"unreadable ({type(e).__name__}: {e}) {DAMAGED.format(out_dir=self.out_dir)}") from e

    def names(self) -> list[str]:
        """Every scene id, in index order (from names.json; a cache built before it existed is read through)."""
        if self._parts is not None:
            return [n for part in self._parts for n in part.names()]
        if self._names is None:
            path = os.path.join(self.out_dir, NAMES)
            if os.path.exists(path):
                self._names = _read_json(path, self.out_dir)
                if not isinstance(self._names, list):
                    raise ValueError(f"{path}: expected a list of scene ids {DAMAGED.format(out_dir=self.out_dir)}")
            else:
                self._names = [self[i][0] for i in range(len(self))]
            if len(self._names) != len(self):
                raise ValueError(f"{path}: {len(self._names)} names for {len(self)} scenes (rebuild the cache)")
        return self._names

    def load_bank(self, indices: Sequence[int] | None = None) -> tuple[list[str], Scenario]:
        """Scenes at indices (default: all) stacked into one device-resident bank [N, ...]."""
        indices = range(len(self)) if indices is None else indices
        items = [self[int(i)] for i in indices]
        bank = jax.tree.map(lambda *x: jnp.asarray(np.stack(x)), *[s for _, s in items])
        return [name for name, _ in items], bank


# SimConfig fields that shape or fill a stored Scenario (scenario_spec, builder): a cache serves a run
# only if these equal the run's. obs_road is stored too, as each cell's nearest-first road list, so a
# cache built with more serves a run with fewer (its first obs_road entries).
STORED_FIELDS = ("max_agents", "max_road_segments", "max_lanes", "max_lane_successors", "max_route_points",
                 "route_spacing", "log_steps", "dt", "grid_size", "cell_edges", "cell_lanes")


def bank_for(cache_cfg: SimConfig, bank: Scenario, sim: SimConfig, where: str) -> Scenario:
    """bank [N, ...] of a cache built with cache_cfg, as a bank for runs with SimConfig sim: each cell's
    road list cut to sim.obs_road. Raises ValueError naming where (a file or setting) and the first field
    that differs when the cache stores other sizes."""
    for name in STORED_FIELDS:
        built, want = getattr(cache_cfg, name), getattr(sim, name)
        if built != want:
            raise ValueError(f"{where}: built with {name}={built}, this run needs {name}={want} (rebuild it: "
                             f"python -m launch.build_scenes --max_agents={sim.max_agents} "
                             f"--max_road_segments={sim.max_road_segments} --max_lanes={sim.max_lanes} ...)")
    if cache_cfg.obs_road < sim.obs_road:
        raise ValueError(f"{where}: built with obs_road={cache_cfg.obs_road}, this run needs >= {sim.obs_road}")
    return bank.replace(cell_road=bank.cell_road[..., : sim.obs_road])
