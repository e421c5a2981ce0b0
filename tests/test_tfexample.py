"""The WOMD tf.Example reader on small hand-made TFRecords (TensorFlow is optional: skipped without it).

The scene: a straight road along +x, x in [0, 200], edges at y = -4 (eastward) and y = +4
(westward) so the road is on their left; an eastbound lane (id 101) at y = -2, a westbound lane
(102) at y = +2, a centre line, a bike lane, a crosswalk, a stop sign and an undefined (type 0)
polyline. Objects: vehicles 0, 1 eastbound at 10 m/s, 2, 3 westbound at 8 m/s (3 appears at scene
step 20), a parked vehicle 4, a pedestrian 5 on the north side (valid until step 60), padding 6, 7.
A light controls lane 101 (slot 0, moving to slot 3 in the future) and lane 102 (current step only).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the tf.Example reader needs TensorFlow (extra [womd])")

import jax  # noqa: E402

from cp_jax.scenarios.builder import SceneError, build_scenario  # noqa: E402
from cp_jax.scenarios.readers import common, tfexample  # noqa: E402
from cp_jax.sim import env, types  # noqa: E402

N, TP, TC, TF_, L, P = 8, 10, 1, 80, 16, 640
T = TP + TC + TF_
TIMES = np.arange(T) * 0.1
EAST, WEST = 101, 102
MOVING = [0, 1, 2, 3]
PARKED, PEDESTRIAN = 4, 5


def _objects() -> dict[str, np.ndarray]:
    """[N, T] arrays of every per-step state field (WOMD pads invalid entries with -1)."""
    # (x0, y0, yaw, speed, first valid step, last valid step, length, width, type, is_sdc)
    rows = [
        (10.0, -2.0, 0.0, 10.0, 0, T - 1, 4.8, 2.0, 1, 1),
        (40.0, -2.0, 0.0, 10.0, 0, T - 1, 4.5, 1.9, 1, 0),
        (150.0, 2.0, np.pi, 8.0, 0, T - 1, 4.6, 2.0, 1, 0),
        (170.0, 2.0, np.pi, 8.0, 20, T - 1, 5.0, 2.1, 1, 0),
        (185.0, -2.0, 0.0, 0.0, 0, T - 1, 4.4, 1.8, 1, 0),
        (50.0, 6.0, 0.0, 1.4, 0, 60, 0.6, 0.6, 2, 0),
    ]
    f = {k: np.full((N, T), -1.0) for k in ("x", "y", "z", "bbox_yaw", "velocity_x", "velocity_y", "vel_yaw",
                                             "length", "width", "height")}
    f["valid"] = np.zeros((N, T), np.int64)
    f["timestamp_micros"] = np.tile((TIMES * 1e6).astype(np.int64), (N, 1))
    obj_type = np.zeros(N)
    is_sdc = np.zeros(N, np.int64)
    for i, (x0, y0, yaw, v, t0, t1, length, width, kind, sdc) in enumerate(rows):
        live = slice(t0, t1 + 1)
        f["x"][i, live] = (x0 + v * np.cos(yaw) * TIMES)[live]
        f["y"][i, live] = (y0 + v * np.sin(yaw) * TIMES)[live]
        f["z"][i, live] = 0.0
        f["bbox_yaw"][i, live] = f["vel_yaw"][i, live] = yaw
        f["velocity_x"][i, live] = v * np.cos(yaw)
        f["velocity_y"][i, live] = v * np.sin(yaw)
        f["length"][i, live], f["width"][i, live], f["height"][i, live] = length, width, 1.5
        f["valid"][i, live] = 1
        obj_type[i], is_sdc[i] = kind, sdc
    f["length"][0, :TP] = 4.0  # the current step's 4.8 is the one read
    out = {"state/id": np.arange(N, dtype=np.float64) + 1000, "state/type": obj_type, "state/is_sdc": is_sdc,
           "state/tracks_to_predict": np.eye(N, dtype=np.int64)[0],
           "state/objects_of_interest": np.zeros(N, np.int64)}
    for sec, cols in (("past", slice(0, TP)), ("current", slice(TP, TP + TC)), ("future", slice(TP + TC, T))):
        for k, v in f.items():
            out[f"state/{sec}/{k}"] = v[:, cols]
    return out


def _line(x0, y0, x1, y1, n):
    return np.stack([np.linspace(x0, x1, n), np.linspace(y0, y1, n)], -1)


def _roadgraph() -> dict[str, np.ndarray]:
    polys = [
        (EAST, 2, _line(0, -2, 200, -2, 101)),
        (WEST, 2, _line(200, 2, 0, 2, 101)),
        (201, 15, _line(0, -4, 200, -4, 101)),  # south edge, eastward: road on its left
        (202, 16, _line(200, 4, 0, 4, 101)),  # north edge, westward
        (203, 12, _line(0, 0, 200, 0, 101)),  # centre line (one sample marked invalid below)
        (301, 3, _line(0, -3.5, 200, -3.5, 21)),  # bike lane
        (401, 17, np.array([[196.0, -4.5]])),  # stop sign
        (501, 18, np.array([[150.0, -4.0], [154.0, -4.0], [154.0, 4.0], [150.0, 4.0]])),  # crosswalk
        (900, 0, _line(-30, -30, -20, -30, 3)),  # undefined type: skipped
    ]
    xyz = np.full((P, 3), -1.0)
    dirs = np.zeros((P, 3))
    code = np.full((P, 1), -1, np.int64)
    ids = np.full((P, 1), -1, np.int64)
    valid = np.zeros((P, 1), np.int64)
    k = 0
    for pid, kind, pts in polys:
        m = len(pts)
        xyz[k:k + m, :2], xyz[k:k + m, 2] = pts, 0.0
        if m > 1:
            d = np.diff(pts, axis=0, append=pts[-1:] + (pts[-1:] - pts[-2:-1]))
            dirs[k:k + m, :2] = d / np.linalg.norm(d, axis=1, keepdims=True)
        code[k:k + m], ids[k:k + m], valid[k:k + m] = kind, pid, 1
        k += m
    valid[4 * 101 + 50] = 0  # a centre-line sample in the middle
    return {"roadgraph_samples/xyz": xyz, "roadgraph_samples/dir": dirs, "roadgraph_samples/type": code,
            "roadgraph_samples/id": ids, "roadgraph_samples/valid": valid}


def _expected_east_tl() -> np.ndarray:
    out = np.full(T, types.TL_GO)  # past: go (6), current: arrow go (3)
    out[11:41] = types.TL_CAUTION  # future steps 0-29: caution (5)
    out[41:] = types.TL_STOP  # future 30-69: stop (4), 70-79: flashing stop (7)
    return out


def _lights() -> dict[str, np.ndarray]:
    state = np.zeros((T, L), np.int64)
    valid = np.zeros((T, L), np.int64)
    ids = np.full((T, L), -1, np.int64)
    state[:TP, 0], state[TP, 0] = 6, 3
    valid[: TP + 1, 0], ids[: TP + 1, 0] = 1, EAST
    fut = np.concatenate([np.full(30, 5), np.full(40, 4), np.full(10, 7)])
    state[TP + 1 :, 3], valid[TP + 1 :, 3], ids[TP + 1 :, 3] = fut, 1, EAST  # the lane moved to slot 3
    state[TP, 1], valid[TP, 1], ids[TP, 1] = 8, 1, WEST  # flashing caution, current step only
    state[TP + 5, 2], valid[TP + 5, 2], ids[TP + 5, 2] = 4, 0, WEST  # invalid entry: ignored
    out = {}
    for sec, rows in (("past", slice(0, TP)), ("current", slice(TP, TP + 1)), ("future", slice(TP + 1, T))):
        out[f"traffic_light_state/{sec}/state"] = state[rows]
        out[f"traffic_light_state/{sec}/valid"] = valid[rows]
        out[f"traffic_light_state/{sec}/id"] = ids[rows]
        for axis in ("x", "y", "z"):
            out[f"traffic_light_state/{sec}/{axis}"] = np.zeros((rows.stop - rows.start, L))
    return out


def scene_features(scenario_id: str = "scene-a") -> dict:
    return {**_objects(), **_roadgraph(), **_lights(), "scenario/id": scenario_id.encode()}


def to_example(features: dict) -> bytes:
    """A serialized tf.train.Example: floats as float_list (float32), integers as int64_list."""
    ex = tf.train.Example()
    for key, value in features.items():
        feature = ex.features.feature[key]
        if isinstance(value, bytes):
            feature.bytes_list.value.append(value)
            continue
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            feature.float_list.value.extend(arr.astype(np.float32).ravel().tolist())
        else:
            feature.int64_list.value.extend(arr.astype(np.int64).ravel().tolist())
    return ex.SerializeToString()


def write_records(path, records: list[bytes]) -> str:
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return str(path)


@pytest.fixture(scope="module")
def parts() -> common.SceneParts:
    return tfexample.parse_example(to_example(scene_features()), "mem")


@pytest.fixture(scope="module")
def first_read(tmp_path_factory):
    path = write_records(tmp_path_factory.mktemp("womd") / "three.tfrecord",
                         [to_example(scene_features(f"scene-{c}")) for c in "abc"])
    return path, tfexample.read(path)


def test_polylines(parts):
    by_id = {map_id: (kind, poly) for kind, poly, map_id in parts.polylines}
    assert len(parts.polylines) == 8  # the type-0 polyline is skipped
    assert {k: v[0] for k, v in by_id.items()} == {
        EAST: "lane", WEST: "lane", 201: "road_edge", 202: "road_edge", 203: "road_line",
        301: "road_line", 401: "stop_sign", 501: "crosswalk",
    }
    assert [m for _, _, m in parts.polylines] == [EAST, WEST, 201, 202, 203, 301, 401, 501]  # file order
    for map_id, first, last, n in ((EAST, (0, -2), (200, -2), 101), (WEST, (200, 2), (0, 2), 101),
                                   (201, (0, -4), (200, -4), 101), (202, (200, 4), (0, 4), 101),
                                   (203, (0, 0), (200, 0), 100), (301, (0, -3.5), (200, -3.5), 21)):
        poly = by_id[map_id][1]
        assert poly.shape == (n, 2), map_id
        np.testing.assert_allclose(poly[0], first, atol=1e-4)
        np.testing.assert_allclose(poly[-1], last, atol=1e-4)
    np.testing.assert_allclose(by_id[401][1], [[196.0, -4.5]])
    assert by_id[501][1].shape == (4, 2)


def test_objects(parts):
    assert parts.name == "mem (scenario scene-a)"
    assert parts.xy.shape == (N, T, 2) and parts.valid.shape == (N, T)
    np.testing.assert_allclose(parts.xy[0, 0], (10, -2), atol=1e-4)
    np.testing.assert_allclose(parts.xy[0, 90], (100, -2), atol=1e-4)
    np.testing.assert_allclose(parts.xy[2, 90], (150 - 72, 2), atol=1e-4)
    np.testing.assert_allclose(parts.xy[PARKED, 90], (185, -2), atol=1e-4)
    np.testing.assert_allclose(parts.vel[1, 50], (10, 0), atol=1e-4)
    np.testing.assert_allclose(parts.yaw[2, 30], np.pi, atol=1e-5)
    assert parts.valid[:5, 20:].all() and not parts.valid[3, :20].any()
    assert parts.valid[PEDESTRIAN, :61].all() and not parts.valid[PEDESTRIAN, 61:].any()
    assert not parts.valid[6:].any()
    np.testing.assert_allclose(parts.size[0], (4.8, 2.0), atol=1e-5)  # current step, not the past's 4.0
    np.testing.assert_allclose(parts.size[3], (5.0, 2.1), atol=1e-5)  # current invalid: first valid step
    assert parts.obj_type == ["vehicle"] * 5 + ["pedestrian", "other", "other"]
    assert parts.sdc == 0 and parts.goal is None
    np.testing.assert_array_equal(parts.object_ids, np.arange(N) + 1000)


def test_traffic_lights(parts):
    assert set(parts.tl) == {EAST, WEST}
    np.testing.assert_array_equal(parts.tl[EAST], _expected_east_tl())
    west = np.zeros(T, np.int32)
    west[TP] = types.TL_CAUTION
    np.testing.assert_array_equal(parts.tl[WEST], west)


def test_read_assembles_scenes(first_read):
    path, results = first_read
    assert len(results) == 3
    assert all(isinstance(r, tuple) for r in results)
    raw, notes = results[0]
    assert raw.name == f"{path}[0] (scenario scene-a)" and results[2][0].name.endswith("(scenario scene-c)")
    assert notes.dropped_objects == 2 and notes.dropped_polylines == 1 and notes.heading_unit == "rad"
    assert raw.num_objects == 6 and raw.num_steps == T
    assert len(raw.lanes) == 2 and len(raw.edges) == 2
    assert sorted(kind for kind, _ in raw.others) == [types.ROAD_LINE, types.ROAD_LINE, types.CROSSWALK,
                                                      types.STOP_SIGN]
    np.testing.assert_array_equal(raw.controllable, [True, True, True, False, False, False])
    assert not raw.controllable[PARKED] and raw.sdc == 0
    np.testing.assert_allclose(raw.goal[0], (100, -2), atol=1e-4)  # the final valid position
    np.testing.assert_allclose(raw.goal[PEDESTRIAN], (50 + 1.4 * 6.0, 6), atol=1e-4)
    east = next(i for i, lane in enumerate(raw.lanes) if np.allclose(lane[0], (0, -2), atol=1e-4))
    west = 1 - east
    assert raw.routes[0] == [east] and raw.routes[2] == [west]
    expected = _expected_east_tl()
    for t in (0, 10, 11, 40, 41, 80, 81, 90):
        assert raw.tl_state[east, t] == expected[t], t
    assert raw.tl_state[east, 0] == types.TL_GO and raw.tl_state[east, 30] == types.TL_CAUTION
    assert raw.tl_state[east, 60] == types.TL_STOP
    assert raw.tl_state[west, TP] == types.TL_CAUTION and raw.tl_state[west].sum() == types.TL_CAUTION


def test_missing_feature_rejects_only_that_record(tmp_path):
    bad = scene_features("scene-bad")
    del bad["state/current/velocity_x"]
    path = write_records(tmp_path / "mixed.tfrecord",
                         [to_example(scene_features("s0")), to_example(bad), to_example(scene_features("s2"))])
    results = tfexample.read(path)
    assert len(results) == 3
    assert isinstance(results[0], tuple) and isinstance(results[2], tuple)
    err = results[1]
    assert isinstance(err, SceneError)
    assert "state/current/velocity_x" in str(err) and path in str(err) and "[1]" in str(err)
    assert "missing" in str(err)


def test_missing_roadgraph_and_partial_lights_are_named():
    for key in ("roadgraph_samples/xyz", "state/id", "traffic_light_state/future/valid"):
        feats = scene_features()
        del feats[key]
        with pytest.raises(SceneError, match=key):
            tfexample.parse_example(to_example(feats), "mem")


def test_optional_features():
    feats = scene_features()
    for key in [k for k in feats if k.startswith("traffic_light_state/")] + ["state/is_sdc", "scenario/id"]:
        del feats[key]
    parts = tfexample.parse_example(to_example(feats), "mem")
    assert parts.tl == {} and parts.sdc == -1 and parts.name == "mem"
    raw, _ = common.assemble(parts)
    assert raw.tl_state is None and raw.sdc == 0  # the first controllable vehicle


def test_nan_in_valid_future_is_rejected(tmp_path):
    feats = scene_features()
    feats["state/future/x"] = feats["state/future/x"].copy()
    original = feats["state/future/x"][1, 7]
    feats["state/future/x"][1, 7] = np.nan
    path = write_records(tmp_path / "nan.tfrecord", [to_example(feats)])
    (err,) = tfexample.read(path)
    assert isinstance(err, SceneError)
    assert "state/future/x" in str(err) and "object 1" in str(err) and "step 7" in str(err)
    # NaN in an invalid step is ignored.
    feats["state/future/x"][1, 7] = original
    feats["state/future/x"][3, 2] = np.nan  # object 3 is invalid before scene step 20
    assert tfexample.parse_example(to_example(feats), "ok").xy.shape == (N, T, 2)


def test_wrong_shape_is_named():
    feats = scene_features()
    feats["state/future/y"] = feats["state/future/y"][:, :79]
    with pytest.raises(SceneError, match="state/future/y"):
        tfexample.parse_example(to_example(feats), "mem")


def test_bad_bytes_and_files(tmp_path):
    with pytest.raises(SceneError, match="<record>"):
        tfexample.parse_example(b"\xff\xff not a proto", "junk")
    with pytest.raises(SceneError, match="no such file"):
        tfexample.read(str(tmp_path / "absent.tfrecord"))
    path = write_records(tmp_path / "cut.tfrecord", [to_example(scene_features())] * 2)
    with open(path, "rb") as fh:
        data = fh.read()
    with open(path, "wb") as fh:
        fh.write(data[:-100])  # the second record is cut short
    results = tfexample.read(path)
    assert len(results) == 2 and isinstance(results[0], tuple)
    assert isinstance(results[1], SceneError) and f"{path}[1]" in str(results[1])
    assert len(list(tfexample.iter_records(write_records(tmp_path / "empty.tfrecord", [])))) == 0


def test_missing_tensorflow_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(ImportError, match=r"pip install 'cp_jax\[womd\]'"):
        tfexample.parse_example(b"", "x")


def test_log_replay_has_no_collision_or_offroad(first_read):
    _, results = first_read
    raw, _ = results[0]
    cfg = types.SimConfig(max_agents=16, max_road_segments=512, max_lanes=16, obs_road=64)
    sc = build_scenario(raw, cfg)
    east = next(i for i, lane in enumerate(raw.lanes) if np.allclose(lane[0], (0, -2), atol=1e-4))
    np.testing.assert_array_equal(np.asarray(sc.tl_state[east]), _expected_east_tl())
    final, traj = jax.jit(env.replay_log, static_argnums=(2,))(sc, types.default_params(), cfg)
    out = traj.out
    collided, offroad, active = (np.asarray(a) for a in (out.collided, out.offroad, out.active))
    assert active[:, MOVING].sum() >= 300  # the moving vehicles were in the world most of the time
    assert not collided[:, :6].any()
    assert not offroad[:, MOVING].any()
    assert int(final.t) == cfg.episode_steps
    np.testing.assert_allclose(np.asarray(final.xy)[0], (100, -2), atol=1e-3)  # the log, replayed
    np.testing.assert_allclose(np.asarray(final.xy)[3], (170 - 72, 2), atol=1e-3)
