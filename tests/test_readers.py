"""Real-data readers (GPUDrive/PufferDrive JSON), validation rules, truncation, the scenario cache."""

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from cp_jax.scenarios.builder import SceneError, build_scenario, fit_to_config
from cp_jax.scenarios.readers import common, gpudrive_json
from cp_jax.sim import conditions, env, types

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WOMD = DATA / "womd_json"
SHORT = DATA / "womd_json_short"
needs_data = pytest.mark.skipif(not WOMD.is_dir(), reason=f"real WOMD samples not found at {WOMD}")
CFG = types.SimConfig(max_agents=128, max_road_segments=4096, max_lanes=512, obs_road=64, enable_idm=False)


def _scene_json(n_steps=91):
    """A tiny valid scene in the JSON layout: a straight road, two moving cars, one parked car."""
    xs = np.linspace(0, 200, 101)  # a point every 2 m
    pt = lambda x, y: {"x": float(x), "y": float(y), "z": 0.0}  # noqa: E731

    def obj(x0, y, speed, heading, kind="vehicle"):
        t = np.arange(n_steps) * 0.1
        return {
            "position": [pt(x0 + speed * k * np.cos(heading), y) for k in t],
            "velocity": [{"x": speed * np.cos(heading), "y": 0.0} for _ in t],
            "heading": [heading] * n_steps, "valid": [True] * n_steps,
            "width": 2.0, "length": 4.5, "type": kind,
            "goalPosition": pt(x0 + speed * t[-1] * np.cos(heading), y),
        }

    return {
        "name": "tiny", "scenario_id": "tiny",
        "objects": [obj(10, -2, 8, 0.0), obj(150, 2, 6, np.pi), obj(60, -3.0, 0, 0.0), obj(0, 0, 0, 0.0, "pedestrian")],
        "roads": [
            {"type": "lane", "geometry": [pt(x, -2) for x in xs], "id": 1},
            {"type": "lane", "geometry": [pt(x, 2) for x in xs[::-1]], "id": 2},
            {"type": "road_edge", "geometry": [pt(x, -4) for x in xs]},
            {"type": "road_edge", "geometry": [pt(x, 4) for x in xs[::-1]]},
            {"type": "road_line", "geometry": [pt(x, 0) for x in xs]},
            {"type": "stop_sign", "geometry": [pt(190, -3)]},
        ],
        "tl_states": {"1": {"state": ["stop"] * 5 + ["go"] * 5, "time_index": list(range(10)), "x": [0] * 10,
                            "y": [0] * 10, "z": [0] * 10}},
        "metadata": {"sdc_track_index": 0},
    }


def _write(tmp_path, data, name="scene.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_reads_a_valid_scene(tmp_path):
    raw, notes = gpudrive_json.read(_write(tmp_path, _scene_json()))
    assert raw.num_objects == 4 and len(raw.lanes) == 2 and len(raw.edges) == 2
    np.testing.assert_array_equal(raw.controllable, [True, True, False, False])  # parked, pedestrian
    assert raw.sdc == 0 and notes.heading_unit == "rad"
    assert raw.tl_state[0, 0] == types.TL_STOP and raw.tl_state[0, 7] == types.TL_GO and raw.tl_state[1].max() == 0
    assert any(kind == types.STOP_SIGN for kind, _ in raw.others)  # a point became a 1 m segment
    assert raw.routes[0] == [0] and raw.routes[1] == [1]
    # Straight polylines are decimated, then split into <= 10 m segments: 100 -> 20 per lane.
    assert len(raw.lanes[0]) == 21 and notes.segments_after_decimation < notes.segments_before_decimation / 4


def test_degrees_are_detected(tmp_path):
    data = _scene_json()
    for o in data["objects"]:
        o["heading"] = [np.degrees(h) + 720.0 for h in o["heading"]]  # unwrapped degrees
    raw, notes = gpudrive_json.read(_write(tmp_path, data))
    assert notes.heading_unit == "deg"
    np.testing.assert_allclose(raw.log_yaw[1, 0], np.pi, atol=1e-6)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("roads"), "'roads'"),  # R1
        (lambda d: d["objects"][1].pop("heading"), r"objects\[1\].heading"),
        (lambda d: d["objects"][0]["position"][5].update(x=float("nan")), r"objects\[0\].position"),  # R2
        (lambda d: d["roads"][0]["geometry"][3].update(y=float("inf")), r"roads\[0\].geometry"),
        (lambda d: d["objects"][1]["valid"].pop(), r"objects\[1\].valid"),
        (lambda d: [o.update(type="pedestrian") for o in d["objects"]], "no controllable vehicle"),  # R5
        (lambda d: d["roads"][0].update(type="river"), r"roads\[0\].type"),
    ],
)
def test_validation_rules_name_the_file_and_field(tmp_path, mutate, field):
    data = _scene_json()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(SceneError, match=field) as e:
        gpudrive_json.read(path)
    assert "scene.json" in str(e.value)


def test_degenerate_polylines_and_never_valid_objects_are_dropped_and_counted(tmp_path):
    data = _scene_json()
    data["roads"].append({"type": "road_line", "geometry": [{"x": 1, "y": 1, "z": 0}]})  # R3
    ghost = copy.deepcopy(data["objects"][0])
    ghost["valid"] = [False] * 91
    data["objects"].append(ghost)  # R4
    raw, notes = gpudrive_json.read(_write(tmp_path, data))
    assert notes.dropped_polylines == 1 and notes.dropped_objects == 1 and raw.num_objects == 4


def test_short_logs_are_rejected_when_built(tmp_path):
    raw, _ = gpudrive_json.read(_write(tmp_path, _scene_json(n_steps=11)))  # R6
    with pytest.raises(SceneError, match="log_steps.*11 steps"):
        build_scenario(raw, CFG)


def test_not_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(SceneError, match="broken.json"):
        gpudrive_json.read(str(path))


def test_fit_to_config_keeps_the_sdc_and_the_nearest():
    raw, _ = gpudrive_json.read(_write_tmp(_scene_json()))
    small = types.SimConfig(max_agents=2, max_road_segments=8, max_lanes=4, obs_partners=1, obs_road=4,
                            cell_edges=4, cell_lanes=4)
    fitted, dropped_objects, dropped_segments = fit_to_config(raw, small)
    assert fitted.num_objects == 2 and dropped_objects == 2
    assert fitted.sdc == 0 and np.allclose(fitted.log_xy[0], raw.log_xy[0])
    n_seg = sum(len(p) - 1 for p in fitted.lanes) + sum(len(p) - 1 for p in fitted.edges)
    n_seg += sum(len(p) - 1 for _, p in fitted.others)
    assert n_seg <= 8 and dropped_segments > 0
    assert all(0 <= j < len(fitted.lanes) for r in fitted.routes for j in r)
    build_scenario(fitted, small)  # fits


def test_fit_to_config_keeps_the_lanes_nearest_the_objects_when_lanes_are_over_budget():
    """More lanes than max_lanes (segments within budget): the nearest lanes are kept, the lane graph and
    routes re-indexed, every road edge kept."""
    import dataclasses

    raw, _ = gpudrive_json.read(_write_tmp(_scene_json()))
    one_lane = dataclasses.replace(CFG, max_lanes=1)
    for far in (0, 1):  # move one lane 60 m away: the other is the one kept
        lanes = [np.asarray(p, dtype=np.float64).copy() for p in raw.lanes]
        lanes[far][:, 1] += 60.0
        fitted, dropped_objects, dropped_segments = fit_to_config(dataclasses.replace(raw, lanes=lanes), one_lane)
        assert len(fitted.lanes) == 1 and dropped_objects == 0 and dropped_segments == len(lanes[far]) - 1
        assert np.allclose(fitted.lanes[0], lanes[1 - far]) and len(fitted.edges) == len(raw.edges)
        kept_route = [[0] if r == [1 - far] else [] for r in raw.routes]
        assert fitted.routes == kept_route
        build_scenario(fitted, one_lane)  # fits
    with pytest.raises(SceneError, match="max_lanes=1"):
        build_scenario(raw, one_lane)


def _write_tmp(data):
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, "scene.json")
    with open(path, "w") as f:
        json.dump(data, f)
    return path


@needs_data
@pytest.mark.optimized
def test_all_real_scenes_convert_and_short_ones_are_rejected():
    for path in sorted(WOMD.glob("*.json")):
        raw, notes = gpudrive_json.read(str(path))
        raw, _, _ = fit_to_config(raw, CFG)
        sc = build_scenario(raw, CFG)
        assert int(sc.controllable.sum()) >= 1
        # Old-generation files (no object ids) store degrees; new ones radians.
        has_ids = "id" in json.loads(path.read_text())["objects"][0]
        assert notes.heading_unit == ("rad" if has_ids else "deg"), path.name
    for path in sorted(SHORT.glob("*.json")):
        raw, _ = gpudrive_json.read(str(path))
        with pytest.raises(SceneError, match="log_steps"):
            build_scenario(fit_to_config(raw, CFG)[0], CFG)


@needs_data
@pytest.mark.optimized
def test_log_replay_of_real_scenes_is_clean_for_moving_vehicles():
    """The issue's bar: among moving vehicles (>= 2 m over the log) < 5% ever off-road, < 1% ever
    collide, over the 20 scenes, under log replay of everyone."""

    @jax.jit
    def replay(sc):
        _, traj = env.replay_log(sc, types.default_params(), CFG)
        return traj.out.collided, traj.out.offroad

    moving = collided = offroad = 0
    for path in sorted(WOMD.glob("*.json")):
        raw, _ = gpudrive_json.read(str(path))
        raw, _, _ = fit_to_config(raw, CFG)
        coll, off = (np.asarray(x).any(0)[: raw.num_objects] for x in replay(build_scenario(raw, CFG)))
        first = np.argmax(raw.log_valid, 1)
        moved = np.linalg.norm(raw.goal - raw.log_xy[np.arange(raw.num_objects), first], axis=-1) >= 2.0
        mask = moved & (raw.obj_type == types.VEHICLE)
        moving += mask.sum()
        collided += (coll & mask).sum()
        offroad += (off & mask).sum()
    assert moving >= 250
    assert offroad / moving < 0.05 and collided / moving < 0.01


def test_cache_round_trip_and_build_command(tmp_path):
    from cp_jax.scenarios.cache import ScenarioCache

    src = tmp_path / "src"
    src.mkdir()
    _write(src, _scene_json(), "a.json")
    _write(src, _scene_json(n_steps=11), "short.json")
    bad = _scene_json()
    bad["objects"][0]["position"][3]["x"] = float("nan")
    _write(src, bad, "nan.json")
    (src / "junk.json").write_text("[1, 2")
    out = tmp_path / "cache"
    cmd = [sys.executable, "-m", "launch.build_scenes", f"--src={src}", f"--out={out}", "--max_agents=8",
           "--max_road_segments=256", "--max_lanes=8"]
    res = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("1 scenes converted, 3 skipped")
    report = json.loads((out / "report.json").read_text())
    reasons = {r["scene"]: r.get("reason", "") for r in report["scenes"]}
    assert "log_steps" in reasons["short"] and "position" in reasons["nan"] and "JSON" in reasons["junk"]
    cache = ScenarioCache(str(out))
    assert len(cache) == 1
    name, scenario = cache[0]
    assert name == "a"
    direct = build_scenario(gpudrive_json.read(str(src / "a.json"))[0], cache.cfg)
    for field in ("log_xy", "road_xy0", "cell_edges", "route_xy", "controllable"):
        np.testing.assert_array_equal(np.asarray(getattr(scenario, field)), np.asarray(getattr(direct, field)))
    names, bank = cache.load_bank()
    assert bank.log_xy.shape == (1, 8, 91, 2)


def test_lane_neighbours_survive_decimation():
    xs = np.linspace(0, 60, 61)
    lanes = [np.stack([xs, np.zeros_like(xs)], -1), np.stack([xs, np.full_like(xs, 3.5)], -1)]
    succ, left, right = common.lane_graph(lanes)
    assert left == [1, -1] and right == [-1, 0]
    data = _scene_json()
    right_lane = [{"x": float(x), "y": -5.5, "z": 0} for x in np.linspace(0, 200, 101)]
    data["roads"].append({"type": "lane", "geometry": right_lane})
    raw, _ = gpudrive_json.read(_write_tmp(data))
    assert len(raw.lanes[0]) == 21  # decimated ...
    assert raw.lane_right[0] == 2 and raw.lane_left[2] == 0  # ... yet the neighbours were found


def test_decimation_keeps_a_polyline_that_doubles_back():
    out = common.decimate(np.array([[0.0, 0.0], [10.0, 0.0], [5.0, 0.0]]))
    assert np.abs(out - [10.0, 0.0]).sum(-1).min() < 1e-9


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["objects"][0].update(goalPosition=[1, 2]),
        lambda d: d["objects"][0].update(valid=None),
        lambda d: d.update(metadata={"sdc_track_index": None}),
        lambda d: d.update(tl_states=[{"state": []}]),
    ],
)
def test_values_of_the_wrong_kind_are_scene_errors(tmp_path, mutate):
    data = _scene_json()
    mutate(data)
    with pytest.raises(SceneError, match="scene.json"):
        gpudrive_json.read(_write(tmp_path, data))


def test_half_a_goal_is_no_goal(tmp_path):
    data = _scene_json()
    data["objects"][0]["goalPosition"] = {"x": None, "y": 50.0}
    raw, _ = gpudrive_json.read(_write(tmp_path, data))
    np.testing.assert_allclose(raw.goal[0], raw.log_xy[0, -1])


def test_build_scenes_reports_when_nothing_converts_and_refuses_to_overwrite(tmp_path):
    from cp_jax.jobs import convert
    from cp_jax.sim import types

    src = tmp_path / "src"
    src.mkdir()
    _write(src, _scene_json(n_steps=11), "short.json")
    out = tmp_path / "cache"
    cmd = [sys.executable, "-m", "launch.build_scenes", f"--src={src}", f"--out={out}", "--max_agents=8",
           "--max_road_segments=256", "--max_lanes=8"]
    res = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 1, res.stderr[-2000:]  # it produced nothing (issue #33)
    assert res.stdout.strip().splitlines()[-1].startswith("0 scenes converted, 1 skipped")
    assert "build_scenes: no scene converted (1 skipped)" in res.stderr and "skip short: " in res.stderr
    assert json.loads((out / "report.json").read_text())["scenes"][0]["status"] == "skipped"
    # the same job in-process: one good file converts; converting into a cache again is refused
    cfg = types.SimConfig(max_agents=8, max_road_segments=256, max_lanes=8, log_steps=91, episode_steps=90)
    _write(src, _scene_json(), "ok.json")
    good = tmp_path / "good"
    assert convert.convert(str(good), cfg, convert.sources("gpudrive_json", str(src), 0))["converted"] == 1
    with pytest.raises(ValueError, match="already holds a scenario cache"):
        convert.convert(str(good), cfg, convert.sources("gpudrive_json", str(src), 0))
    with pytest.raises(ValueError, match="--files='5:'"):  # a file slice that selects nothing, before any write
        convert.sources("gpudrive_json", str(src), 0, "5:")
    with pytest.raises(ValueError, match="--format=procedural has none"):
        convert.sources("procedural", None, 2, "0:1")


def test_scene_files_are_sorted_by_name_and_sliced(tmp_path):
    from cp_jax.scenarios.readers.files import scene_files

    for name in ("c.json", "a.json", "b.json", "notes.txt"):
        (tmp_path / name).write_text("{}")
    names = lambda spec: [os.path.basename(p) for p in scene_files(str(tmp_path), "*.json", spec)]
    assert names("") == ["a.json", "b.json", "c.json"]
    assert names("0:2") == ["a.json", "b.json"] and names("2:") == ["c.json"] and names(":1") == ["a.json"]
    for bad in ("2", "a:b", "-1:", "1:2:3"):
        with pytest.raises(ValueError, match="--files"):
            scene_files(str(tmp_path), "*.json", bad)
    with pytest.raises(ValueError, match="selects none of the 3"):
        scene_files(str(tmp_path), "*.json", "3:")
    with pytest.raises(ValueError, match="not a folder"):
        scene_files(str(tmp_path / "missing"), "*.json")


def test_an_object_without_a_lane_route_drives_its_logged_path_under_idm():
    """No lane route (a lane change, a parking lot): the builder routes a moving controllable object
    along its logged path, so an IDM-controlled one drives that path at IDM's own speed instead of
    replaying its log; a parked one (< 2 m of log) gets no route and keeps replaying."""
    from tests.worlds import straight_road

    raw = straight_road([(10.0, -2.0, 0.0, 3.0), (60.0, -2.0, 0.0, 0.0)], steps=31)
    raw.routes[0], raw.routes[1] = [], []
    cfg = types.SimConfig(max_agents=4, max_road_segments=256, max_lanes=4, obs_road=16, log_steps=31,
                          episode_steps=30)
    sc = build_scenario(raw, cfg)
    n = int(sc.route_len[0])
    assert n >= 2 and int(sc.route_len[1]) == 0
    pts = np.asarray(sc.route_xy[0, :n])
    assert np.allclose(pts[:, 1], -2.0, atol=1e-4) and pts[0, 0] == pytest.approx(10.0)
    assert pts[-1, 0] == pytest.approx(raw.goal[0, 0] + 30.0, abs=cfg.route_spacing)  # drives through the goal
    assert (np.asarray(sc.route_lane[0, :n]) == -1).all()
    ctrl = np.array([types.IDM, types.IDM, types.LOG, types.LOG])
    s = env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), cfg, ctrl)
    for _ in range(20):
        s, _ = env.step(s, np.zeros(cfg.max_agents, np.int32), sc, types.default_params(), cfg)
    xy = np.asarray(s.xy)
    assert xy[0, 0] > float(sc.log_xy[0, 20, 0]) + 1.0  # IDM speeds up past the 3 m/s log
    assert abs(xy[0, 1] + 2.0) < 1e-3  # on the logged path
    assert np.allclose(xy[1], np.asarray(sc.log_xy[1, 20]), atol=1e-5)  # the parked car stays


def test_scene_statistics_sets_are_checked_before_any_scene_is_made(tmp_path):
    from cp_jax.jobs import scene_stats

    cfg = types.SimConfig(max_agents=8, max_road_segments=256, obs_road=16)
    with pytest.raises(ValueError, match=r"procedural kinds: unknown layout kinds \['motorway'\]"):
        scene_stats.load_set("procedural", 2, cfg, str(tmp_path), ("highway", "motorway"))
    with pytest.raises(ValueError, match="not a folder"):
        scene_stats.load_set("cache", str(tmp_path / "none"), cfg)
    assert not any(tmp_path.iterdir())  # nothing generated


def test_scene_statistics_measure_what_they_say():
    """Known starts on the straight road (lanes at y = -2 / +2, edges at +-4, lane spacing 4 m)."""
    from cp_jax.scenarios import stats
    from tests.worlds import straight_road

    raw = straight_road([(10.0, -2.5, 0.0, 5.0), (30.0, -2.0, 0.1, 12.0), (190.0, 2.0, np.pi, 0.0)], steps=31)
    cfg = types.SimConfig(max_agents=4, max_road_segments=256, max_lanes=4, obs_road=16, log_steps=31,
                          episode_steps=30)
    bank = env.stack_scenarios([build_scenario(raw, cfg)])
    s = stats.scene_statistics(bank, cfg)
    # Drivers: the two moving cars (the third is parked: its goal is its start).
    assert len(s["start_speed"]) == 2 and np.allclose(sorted(s["start_speed"]), [5.0, 12.0], atol=1e-4)
    np.testing.assert_allclose(sorted(s["start_offset"]), [0.0, 0.5], atol=1e-4)
    np.testing.assert_allclose(sorted(s["start_heading_error"]), [0.0, np.degrees(0.1)], atol=1e-3)
    assert np.all(s["path_curvature"] < 1e-3)  # straight logs
    assert s["density"].tolist() == [1.0, 1.0]  # each other, 20 m apart (the parked car is 160 m away)
    assert s["edge_clearance"].min() == pytest.approx(4.0 - 2.5 - 1.0, abs=0.05)  # half width 1 m
    assert np.nanmedian(s["lane_width"]) == pytest.approx(4.0, abs=1e-3)
    q = stats.summarise(s)
    assert q["start_speed"]["n"] == 2 and q["start_speed"]["p50"] == pytest.approx(8.5, abs=1e-3)


def test_max_segment_splits_the_roads_without_moving_them(tmp_path):
    """--max_segment: every road segment <= the length, the simplified polyline's corners kept and every
    new vertex on it (the same polylines, only cut finer); a length below 0.1 m, or one for procedural
    scenes, is refused before reading."""
    from cp_jax.jobs import convert

    data = _scene_json()
    bend = [{"x": x, "y": y, "z": 0} for x, y in ((0.0, -9.0), (12.0, -9.0), (12.0, -30.0), (47.0, -40.0))]
    data["roads"].append({"type": "road_edge", "geometry": bend})  # lengths not a multiple of 2.5 m
    path = _write(tmp_path, data, "a.json")
    coarse, _ = gpudrive_json.read(path)
    fine, _ = gpudrive_json.read(path, max_segment=2.5)
    for a, b in zip(coarse.lanes + coarse.edges, fine.lanes + fine.edges, strict=True):
        assert np.linalg.norm(np.diff(b, axis=0), axis=1).max() <= 2.5 + 1e-6 and len(b) > len(a)
        corners = common.decimate(a, max_len=np.inf)
        assert np.abs(corners[:, None] - b[None]).sum(-1).min(1).max() < 1e-9
        ab = corners[1:] - corners[:-1]  # every fine vertex on a segment of the simplified polyline
        t = np.clip(np.einsum("psk,sk->ps", b[:, None] - corners[None, :-1], ab) / np.sum(ab * ab, -1), 0, 1)
        gap = np.linalg.norm(b[:, None] - (corners[None, :-1] + t[..., None] * ab), axis=-1).min(1)
        assert gap.max() < 1e-6
    assert any(np.abs(e - [12.0, -30.0]).sum(-1).min() < 1e-9 for e in fine.edges)  # the bend is read
    with pytest.raises(ValueError, match="max_segment"):
        convert.sources("gpudrive_json", str(tmp_path), 0, "", 0.05)
    with pytest.raises(ValueError, match="max_segment"):
        convert.sources("procedural", None, 2, "", 2.5)
    scenes = convert.sources("gpudrive_json", str(tmp_path), 0, "", 2.5)
    raw, _ = scenes[0][1]()
    np.testing.assert_array_equal(raw.lanes[0], fine.lanes[0])
    cfg = types.SimConfig(max_agents=8, max_road_segments=512, max_lanes=8)
    convert.convert(str(tmp_path / "cache"), cfg, scenes, dict(max_segment=2.5))
    assert json.loads((tmp_path / "cache" / "report.json").read_text())["options"] == {"max_segment": 2.5}


@needs_data
def test_finer_road_segments_keep_the_off_road_test():
    """A real scene cut into 2.5 m segments, with 64 / 48 candidates per cell, gives the same signed edge
    distance at logged vehicle positions (every third) as the default 10 m cut (the off-road test is
    unchanged)."""
    from cp_jax.sim import geometry

    path = str(sorted(WOMD.glob("*.json"))[0])
    fine_cfg = dataclasses.replace(CFG, max_road_segments=8192, cell_edges=64, cell_lanes=48)
    coarse = build_scenario(gpudrive_json.read(path)[0], CFG)
    fine = build_scenario(gpudrive_json.read(path, max_segment=2.5)[0], fine_cfg)
    assert int(fine.road_valid.sum()) > 2 * int(coarse.road_valid.sum())
    keep = np.asarray(coarse.log_valid & (coarse.obj_type == types.VEHICLE)[:, None])
    pts = np.asarray(coarse.log_xy)[keep][::3]  # [P, 2]
    d = [np.asarray(geometry.edge_distance(jax.numpy.asarray(pts)[:, None], sc, cfg))[:, 0]
         for sc, cfg in ((coarse, CFG), (fine, fine_cfg))]
    near = np.abs(d[0]) < 5.0
    assert near.sum() > 100
    np.testing.assert_allclose(d[1][near], d[0][near], atol=5e-3)
