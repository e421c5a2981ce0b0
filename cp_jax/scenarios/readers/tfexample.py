"""Reader for Waymo Open Motion Dataset scenes stored as tf.Example TFRecords (the "tf_example"
release layout, also read by Waymax). One example = one scene.

Layout (N objects, P roadgraph samples, L traffic-light slots; WOMD: N=128, P=20000, L=16):
  state/{id,type} [N] float, state/is_sdc [N] int (optional: sdc -1 when absent),
  state/{past,current,future}/{x,y,bbox_yaw,velocity_x,velocity_y,length,width,valid} [N, steps]
      (10 past + 1 current + 80 future in WOMD; the step counts are read from the data),
  roadgraph_samples/{xyz [P,3], type [P,1], id [P,1], valid [P,1]},
  traffic_light_state/{past,current,future}/{state,valid,id} [steps, L] time-major (optional as a
      group: a file without any traffic_light_state/ key has no lights; one with some must have
      state, valid and id for all three sections), scenario/id bytes (optional).
Features this reader does not use (z, height, vel_yaw, timestamp_micros, roadgraph dir,
tracks_to_predict, objects_of_interest, light x/y/z) are not required.

Mapping to `common.SceneParts`:
- Road polylines: valid roadgraph points in file order, split into runs of consecutive points with
  the same (id, type); each run is one polyline with map id = the roadgraph id. Type codes:
  1, 2 -> lane; 3 (bike lane) -> road_line, so vehicles are never routed along it and no lane graph
  edge or traffic light attaches to it; 6-13 -> road_line; 15, 16 -> road_edge; 17 -> stop_sign;
  18 -> crosswalk; 19 -> speed_bump; 20 -> driveway. Type 0 and codes outside this list are
  skipped and counted in ReadNotes.dropped_polylines.
- Objects: past | current | future concatenated along time; yaw = bbox_yaw (radians); velocity =
  (velocity_x, velocity_y); size (length, width) from the current step, or from the object's
  first valid step when the current one is invalid; type 1/2/3 -> vehicle/pedestrian/cyclist,
  anything else (0 unset, 4 other) -> other. Never-valid rows (padding) are dropped by assemble.
- sdc: the first index with is_sdc == 1, else -1.
- Traffic lights: for every valid (step, slot) entry, lane = id[step, slot] and the state code maps
  to TL_* (1, 4, 7 -> STOP; 2, 5, 8 -> CAUTION; 3, 6 -> GO; 0 and unknown codes -> NONE). Slots are
  not assumed to keep the same lane over time. Steps without a valid entry stay TL_NONE.

Errors raise SceneError through `common.fail(name, field, why)` with the feature key as the field;
name is "<path>[<record index>]" plus the scenario id when the example has one.
TensorFlow is an optional dependency (extra `womd`), imported only when a function needs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from cp_jax.scenarios.builder import SceneError
from cp_jax.scenarios.raw import RawScene
from cp_jax.scenarios.readers import common
from cp_jax.sim import types

TF_MISSING = "reading tf.Example files needs TensorFlow: pip install 'cp_jax[womd]'"
SECTIONS = ("past", "current", "future")
OBJECT_FLOAT_FIELDS = ("x", "y", "bbox_yaw", "velocity_x", "velocity_y", "length", "width")

ROAD_KINDS = {
    1: "lane", 2: "lane",
    3: "road_line",  # bike lane: drawn and observed, never driven on
    6: "road_line", 7: "road_line", 8: "road_line", 9: "road_line", 10: "road_line", 11: "road_line",
    12: "road_line", 13: "road_line",
    15: "road_edge", 16: "road_edge",
    17: "stop_sign", 18: "crosswalk", 19: "speed_bump", 20: "driveway",
}
OBJECT_KINDS = {1: "vehicle", 2: "pedestrian", 3: "cyclist"}
# WOMD TrafficSignalLaneState codes 0..8 -> TL_* ids.
TL_CODES = np.array([
    types.TL_NONE,
    types.TL_STOP, types.TL_CAUTION, types.TL_GO,  # arrow stop / caution / go
    types.TL_STOP, types.TL_CAUTION, types.TL_GO,  # stop / caution / go
    types.TL_STOP, types.TL_CAUTION,  # flashing stop / caution
], np.int32)


def _tf():
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError(TF_MISSING) from e
    return tf


class _Features:
    """Typed, shape-checked access to one tf.train.Example's feature map."""

    def __init__(self, feature_map, name: str):
        self.map = feature_map
        self.name = name
        self._cache: dict[str, np.ndarray] = {}

    def has(self, key: str) -> bool:
        return key in self.map

    def values(self, key: str) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = self._convert(key)
        return self._cache[key]

    def _convert(self, key: str) -> np.ndarray:
        if key not in self.map:
            common.fail(self.name, key, "missing")
        feature = self.map[key]
        kind = feature.WhichOneof("kind")
        if kind == "float_list":
            return np.asarray(feature.float_list.value, np.float64)
        if kind == "int64_list":
            return np.asarray(feature.int64_list.value, np.int64)
        if kind is None:
            return np.zeros(0)
        common.fail(self.name, key, "holds bytes, expected numbers")

    def array(self, key: str, shape: tuple[int, ...]) -> np.ndarray:
        v = self.values(key)
        if v.size != int(np.prod(shape)):
            common.fail(self.name, key, f"{v.size} values, expected {int(np.prod(shape))} (shape {list(shape)})")
        return v.reshape(shape)

    def count(self, key: str, per: int) -> int:
        """Length of feature key / per (a whole number, else SceneError)."""
        n = self.values(key).size
        if per <= 0 or n % per:
            common.fail(self.name, key, f"{n} values, not a multiple of {per}")
        return n // per


def _scenario_id(fm) -> str | None:
    if "scenario/id" not in fm:
        return None
    raw = list(fm["scenario/id"].bytes_list.value)
    return raw[0].decode("utf-8", "replace") if raw else None


def _locate(k: int, steps: dict[str, int]) -> tuple[str, int]:
    """Scene step k -> (section, step within the section)."""
    for sec in SECTIONS:
        if k < steps[sec]:
            return sec, k
        k -= steps[sec]
    raise IndexError(k)


def _objects(f: _Features, name: str):
    n = f.values("state/id").size
    if n == 0:
        common.fail(name, "state/id", "no objects")
    steps = {sec: f.count(f"state/{sec}/x", n) for sec in SECTIONS}
    if steps["current"] < 1:
        common.fail(name, "state/current/x", "no current step")
    cat = {}
    for field in (*OBJECT_FLOAT_FIELDS, "valid"):
        cat[field] = np.concatenate([f.array(f"state/{sec}/{field}", (n, steps[sec])) for sec in SECTIONS], axis=1)
    valid = cat["valid"] > 0
    for field in ("x", "y", "bbox_yaw", "velocity_x", "velocity_y"):
        bad = ~np.isfinite(cat[field]) & valid
        if bad.any():
            i, k = (int(v) for v in np.argwhere(bad)[0])
            sec, s = _locate(k, steps)
            common.fail(name, f"state/{sec}/{field}",
                        f"non-finite value for object {i} at step {s} (scene step {k}; {int(bad.sum())} in all)")
    current = steps["past"]
    pick = np.where(valid[:, current], current, np.argmax(valid, axis=1))
    rows = np.arange(n)
    size = np.stack([cat["length"][rows, pick], cat["width"][rows, pick]], -1)
    for j, field in enumerate(("length", "width")):
        bad = ~np.isfinite(size[:, j]) & valid.any(1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            sec, s = _locate(int(pick[i]), steps)
            common.fail(name, f"state/{sec}/{field}", f"non-finite value for object {i} at step {s}")
    xy = np.stack([cat["x"], cat["y"]], -1)
    vel = np.stack([cat["velocity_x"], cat["velocity_y"]], -1)
    codes = np.rint(np.nan_to_num(f.array("state/type", (n,)), nan=0.0)).astype(np.int64)
    obj_type = [OBJECT_KINDS.get(int(c), "other") for c in codes]
    sdc = -1
    if f.has("state/is_sdc"):
        flags = np.flatnonzero(f.array("state/is_sdc", (n,)) == 1)
        sdc = int(flags[0]) if len(flags) else -1
    ids = np.rint(np.nan_to_num(f.array("state/id", (n,)), nan=-1.0)).astype(np.int64)
    return xy, cat["bbox_yaw"], vel, valid, size, obj_type, sdc, ids, steps


def _roads(f: _Features, name: str) -> tuple[list[tuple[str, np.ndarray, int]], int]:
    p = f.count("roadgraph_samples/xyz", 3)
    xyz = f.array("roadgraph_samples/xyz", (p, 3))
    code = f.array("roadgraph_samples/type", (p,)).astype(np.int64)
    map_id = f.array("roadgraph_samples/id", (p,)).astype(np.int64)
    ok = f.array("roadgraph_samples/valid", (p,)) > 0
    bad = ok & ~np.isfinite(xyz[:, :2]).all(1)
    if bad.any():
        common.fail(name, "roadgraph_samples/xyz", f"non-finite coordinate at sample {int(np.flatnonzero(bad)[0])}")
    xy, code, map_id = xyz[ok, :2], code[ok], map_id[ok]
    polylines, skipped = [], 0
    if len(xy) == 0:
        return polylines, skipped
    cut = np.flatnonzero((np.diff(map_id) != 0) | (np.diff(code) != 0)) + 1
    for lo, hi in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(xy)]]), strict=True):
        kind = ROAD_KINDS.get(int(code[lo]))
        if kind is None:
            skipped += 1
            continue
        polylines.append((kind, xy[lo:hi].copy(), int(map_id[lo])))
    return polylines, skipped


def _lights(f: _Features, name: str, steps: dict[str, int]) -> dict[int, np.ndarray]:
    prefix = "traffic_light_state/"
    if not any(key.startswith(prefix) for key in f.map):
        return {}
    slots = f.count(f"{prefix}current/state", steps["current"])
    cat = {
        field: np.concatenate([f.array(f"{prefix}{sec}/{field}", (steps[sec], slots)) for sec in SECTIONS], axis=0)
        for field in ("state", "valid", "id")
    }
    t = sum(steps.values())
    lane = np.rint(np.nan_to_num(cat["id"], nan=-1.0)).astype(np.int64)
    code = np.rint(np.nan_to_num(cat["state"], nan=0.0)).astype(np.int64)
    tl_id = np.where((code >= 0) & (code < len(TL_CODES)), TL_CODES[np.clip(code, 0, len(TL_CODES) - 1)],
                     types.TL_NONE)
    tl: dict[int, np.ndarray] = {}
    for k, j in np.argwhere((cat["valid"] > 0) & (lane >= 0)):
        tl.setdefault(int(lane[k, j]), np.zeros(t, np.int32))[k] = tl_id[k, j]
    return tl


def _parse(serialized: bytes, name: str) -> tuple[common.SceneParts, int]:
    """-> (SceneParts, number of roadgraph polylines skipped for an unknown / undefined type)."""
    tf = _tf()
    try:
        example = tf.train.Example.FromString(serialized)
    except Exception as e:  # protobuf's DecodeError, whichever implementation is installed
        common.fail(name, "<record>", f"not a tf.train.Example ({type(e).__name__}: {e})")
    fm = example.features.feature
    sid = _scenario_id(fm)
    if sid and sid not in name:
        name = f"{name} (scenario {sid})"
    f = _Features(fm, name)
    xy, yaw, vel, valid, size, obj_type, sdc, ids, steps = _objects(f, name)
    polylines, skipped = _roads(f, name)
    tl = _lights(f, name, steps)
    parts = common.SceneParts(
        name=name, polylines=polylines, xy=xy, yaw=yaw, vel=vel, valid=valid, size=size,
        obj_type=obj_type, goal=None, tl=tl, sdc=sdc, object_ids=ids,
    )
    return parts, skipped


def parse_example(serialized: bytes, name: str) -> common.SceneParts:
    """One serialized tf.train.Example -> SceneParts (checks presence, shapes and finiteness of the
    features it uses; the rest of the validation is `common.assemble`'s). Raises SceneError."""
    return _parse(serialized, name)[0]


def _compression(path: str) -> str:
    return {".gz": "GZIP", ".gzip": "GZIP", ".zlib": "ZLIB"}.get(os.path.splitext(path)[1].lower(), "")


def _check_file(tf, path: str) -> None:
    try:
        exists = tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
    except tf.errors.OpError as e:
        common.fail(path, "<file>", f"cannot read: {e.message}")
    if not exists:
        common.fail(path, "<file>", "cannot read: no such file")


def iter_records(path: str) -> Iterator[bytes]:
    """The serialized records of one TFRecord file, in order (GZIP / ZLIB by a .gz / .zlib suffix).
    An unreadable file or a corrupt record raises SceneError naming the file (and record index)."""
    tf = _tf()
    _check_file(tf, path)
    it = iter(tf.data.TFRecordDataset(path, compression_type=_compression(path)))
    index = 0
    while True:
        try:
            record = next(it)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            common.fail(f"{path}[{index}]", "<record>", f"corrupt TFRecord: {e.message}")
        yield record.numpy()
        index += 1


def read(path: str, decimate_tol: float = 0.1,
         max_segment: float = common.MAX_SEGMENT) -> list[tuple[RawScene, common.ReadNotes] | SceneError]:
    """Every example of a TFRecord file, in order (road segments <= max_segment m): (RawScene, notes),
    or the SceneError of a bad example in its place (the rest of the file is still read). A file that
    cannot be opened raises SceneError; a corrupt record ends the list with its SceneError (nothing
    after it is readable)."""
    tf = _tf()
    _check_file(tf, path)
    out: list[tuple[RawScene, common.ReadNotes] | SceneError] = []
    records = iter_records(path)
    index = 0
    while True:
        try:
            record = next(records)
        except StopIteration:
            break
        except SceneError as e:
            out.append(e)
            break
        try:
            parts, skipped = _parse(record, f"{path}[{index}]")
            raw, notes = common.assemble(parts, decimate_tol, max_segment)
            notes.dropped_polylines += skipped
            out.append((raw, notes))
        except SceneError as e:
            out.append(e)
        index += 1
    return out
