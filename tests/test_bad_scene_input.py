"""Issue #33, scene files: every bad input refused with the file and the field (or coerced and reported),
one bad file never costs the others, tools exit non-zero when they produced nothing, and the log-replay
report says what it left out (objects over max_agents, pedestrians' off-road) with the file's ids."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cp_jax.scenarios.builder import SceneError
from cp_jax.scenarios.readers import common, gpudrive_json
from cp_jax.sim import types
from tests.test_readers import _scene_json, _write

ROOT = Path(__file__).resolve().parents[1]
SMALL = types.SimConfig(max_agents=8, max_road_segments=256, max_lanes=8, log_steps=91, episode_steps=90)


def _read(tmp_path, data):
    return gpudrive_json.read(_write(tmp_path, data))


def _run(*args):
    """A launcher in a subprocess -> (exit code, stdout + stderr)."""
    res = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                         capture_output=True, text=True, timeout=600)
    return res.returncode, res.stdout + res.stderr


def _bad_scenes():
    """One scene per row of the issue: (file stem, scene, the field its error names)."""
    strings = _scene_json()
    strings["objects"][2]["valid"] = ["true"] * 45 + ["false"] * 46  # was read as all True
    vertex = _scene_json()
    vertex["roads"][0]["geometry"][3]["x"] = 1e12  # decimate allocated 745 GiB for it
    far = _scene_json()
    far["objects"][1]["position"][-1]["x"] = 1e12  # converted, controllable, its goal 1e12 m away
    far["objects"][1]["goalPosition"]["x"] = 1e12
    return [("strings", strings, r"objects\[2\]\.valid\[0\]"), ("vertex", vertex, r"roads\[0\]\.geometry\[3\]\.x"),
            ("far", far, r"objects\[1\]\.position\[90\]\.x"), ("one_step", _scene_json(n_steps=1), "log has 1 step;")]


@pytest.mark.parametrize("value", ["true", "false", None, 0.5, 2, [1]])
def test_valid_flags_must_be_json_booleans(tmp_path, value):
    """"false" was read as True (numpy truthiness): placeholder steps became real, parked objects movers."""
    data = _scene_json()
    data["objects"][2]["valid"][7] = value
    with pytest.raises(SceneError, match=r"scene\.json.*'objects\[2\]\.valid\[7\]'.*expected true / false"):
        _read(tmp_path, data)


def test_zero_one_valid_flags_are_a_reported_coercion(tmp_path):
    data = _scene_json()
    data["objects"][1]["valid"] = [1] * 60 + [0] * 31
    raw, notes = _read(tmp_path, data)
    assert raw.log_valid[1].tolist() == [True] * 60 + [False] * 31
    assert notes.coerced == {"valid_as_number": [1]} and set(notes.coerced) <= set(common.COERCIONS)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["objects"][0]["position"][3].update(x="12.5"), r"objects\[0\]\.position\[3\]\.x'.*a string"),
        (lambda d: d["objects"][0]["heading"].__setitem__(4, "0"), r"objects\[0\]\.heading\[4\]'.*a string"),
        (lambda d: d["objects"][0]["velocity"][2].update(y=True), r"objects\[0\]\.velocity\[2\]\.y'.*a boolean"),
        (lambda d: d["objects"][0].update(length="4.5"), r"objects\[0\]\.length'.*a string"),
        (lambda d: d["objects"][0].update(type=1), r"objects\[0\]\.type'.*expected a string"),
        (lambda d: d["roads"][1]["geometry"][0].update(y=None), r"roads\[1\]\.geometry\[0\]\.y'.*null"),
        (lambda d: d["metadata"].update(sdc_track_index=9), r"metadata\.sdc_track_index'.*9 is not an object"),
        (lambda d: d["tl_states"]["1"]["state"].__setitem__(2, "purple"), r"tl_states\['1'\]\.state\[2\]"),
    ],
)
def test_values_of_the_wrong_json_type_name_the_value(tmp_path, mutate, field):
    data = _scene_json()
    mutate(data)
    with pytest.raises(SceneError, match=field):
        _read(tmp_path, data)


@pytest.mark.parametrize(
    "mutate, field",
    [
        # one lane vertex at x = 1e12 made `decimate` allocate 745 GiB (the build died)
        (lambda d: d["roads"][0]["geometry"][3].update(x=1e12), r"roads\[0\]\.geometry\[3\]\.x'.*1e\+12 is outside"),
        (lambda d: d["roads"][2]["geometry"][0].update(y=-2e6), r"roads\[2\]\.geometry\[0\]\.y'.*-2e\+06 is outside"),
        # an object at x = 1e12 was converted, controllable, with its goal 1e12 m away
        (lambda d: [p.update(x=1e12) for p in d["objects"][2]["position"]], r"objects\[2\]\.position\[0\]\.x'.*1e\+12"),
        (lambda d: d["objects"][0]["position"][90].update(x=1e12), r"objects\[0\]\.position\[90\]\.x'.*outside"),
        (lambda d: d["objects"][0]["goalPosition"].update(x=1e12), r"objects\[0\]\.goalPosition\.x'.*outside"),
        (lambda d: d["objects"][1]["velocity"][5].update(x=1e12), r"objects\[1\]\.velocity\[5\]\.x'.*outside.*m/s"),
        (lambda d: d["objects"][1]["heading"].__setitem__(5, 1e12), r"objects\[1\]\.heading\[5\]'.*outside"),
        (lambda d: d["objects"][1].update(length=1e12), r"objects\[1\]\.length'.*outside \(0, 100\]"),
    ],
)
def test_a_far_road_vertex_or_object_is_refused_before_anything_is_allocated(tmp_path, mutate, field):
    """A coordinate, speed, heading or size far outside its bound is refused, naming the field."""
    data = _scene_json()
    mutate(data)
    with pytest.raises(SceneError, match=field):
        _read(tmp_path, data)


def test_roads_too_long_to_split_are_refused(tmp_path):
    """Within the coordinate bound, a road that would split into more than MAX_ROAD_POINTS vertices."""
    data = _scene_json()
    data["roads"][4]["geometry"][-1]["x"] = 0.9 * common.COORD_LIMIT  # 900 km in 0.1 m pieces: 9e6 vertices
    with pytest.raises(SceneError, match=r"roads\[4\]\.geometry'.*needs > 5000000 vertices"):
        gpudrive_json.read(_write(tmp_path, data), max_segment=0.1)


def test_values_at_invalid_steps_are_not_read(tmp_path):
    """Placeholders at invalid steps (WOMD: -10000, NaN) are ignored and zeroed, whatever their size."""
    data = _scene_json()
    data["objects"][0]["valid"][-1] = False
    data["objects"][0]["position"][-1].update(x=1e12, y=float("nan"))
    raw, _ = _read(tmp_path, data)
    assert raw.log_xy[0, -1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("steps", [1, 0])
def test_a_log_too_short_to_move_names_its_length(tmp_path, steps):
    """A 1-step log was skipped as "no controllable vehicle"."""
    data = _scene_json(n_steps=max(steps, 1))
    if steps == 0:
        for o in data["objects"]:
            o.update(position=[], velocity=[], heading=[], valid=[])
    with pytest.raises(SceneError, match=rf"'log_steps'.*log has {steps} steps?; a scene needs >= 2"):
        _read(tmp_path, data)


def test_one_bad_file_never_costs_the_others(tmp_path):
    """The build goes on past every bad file (the 1e12 vertex used to abort it): the good scene converts
    and report.json lists each bad file with the field that was wrong."""
    from cp_jax.jobs import convert

    src = tmp_path / "src"
    src.mkdir()
    for stem, data, _ in _bad_scenes():
        _write(src, data, f"{stem}.json")
    _write(src, _scene_json(), "good.json")
    out = tmp_path / "cache"
    summary = convert.convert(str(out), SMALL, convert.sources("gpudrive_json", str(src), 0))
    assert summary["converted"] == 1 and summary["skipped"] == 4
    report = json.loads((out / "report.json").read_text())
    reasons = {r["scene"]: r.get("reason") for r in report["scenes"]}
    assert reasons.pop("good") is None and report["scenes"][1]["truncated_ids"] == []
    for stem, _, field in _bad_scenes():
        assert f"{stem}.json" in reasons[stem], reasons[stem]
        assert re.search(field, reasons[stem]), reasons[stem]
    assert not (out / "report.json.tmp").exists()


def test_an_unexpected_error_in_one_scene_is_reported_not_fatal(tmp_path):
    from cp_jax.jobs import convert

    good = convert.sources("gpudrive_json", str(Path(_write(tmp_path, _scene_json(), "good.json")).parent), 0)

    def broken():
        raise MemoryError("Unable to allocate 745. GiB")

    summary = convert.convert(str(tmp_path / "cache"), SMALL, [("broken", broken), *good])
    assert summary["converted"] == 1
    report = json.loads((tmp_path / "cache" / "report.json").read_text())["scenes"]
    assert report[0] == dict(scene="broken", status="skipped",
                             reason="broken: unexpected MemoryError: Unable to allocate 745. GiB")


def test_tools_exit_non_zero_when_they_produce_nothing(tmp_path):
    """build_scenes with every file bad and replay_logs with a missing --src (or every file bad) exited 0.
    Now: nothing produced -> exit 1 naming where the reasons are; a missing --src -> a usage error (2)."""
    src = tmp_path / "src"
    src.mkdir()
    for stem, data, _ in _bad_scenes():
        _write(src, data, f"{stem}.json")
    code, text = _run("launch.build_scenes", f"--src={src}", f"--out={tmp_path / 'cache'}", "--max_agents=8",
                      "--max_road_segments=256", "--max_lanes=8")
    assert code == 1, text[-3000:]
    assert "0 scenes converted, 4 skipped" in text and "build_scenes: no scene converted (4 skipped)" in text
    assert "skip strings: " in text and "valid[0]" in text
    assert len(json.loads((tmp_path / "cache" / "report.json").read_text())["scenes"]) == 4

    code, text = _run("launch.replay_logs", f"--src={tmp_path / 'missing'}", f"--out={tmp_path / 'replay'}")
    assert code == 2 and "not a folder" in text and str(tmp_path / "missing") in text, text[-3000:]  # usage
    assert not (tmp_path / "replay").exists()
    code, text = _run("launch.replay_logs", f"--src={src}", f"--out={tmp_path / 'replay'}")
    assert code == 1 and "replay_logs: no scene replayed (4 skipped)" in text, text[-3000:]
    scenes = json.loads((tmp_path / "replay" / "replay.json").read_text())["scenes"]
    assert sorted(s["file"] for s in scenes if "skipped" in s) == sorted(f"{s}.json" for s, _, _ in _bad_scenes())


def _replay_scene():
    """A scene whose replay report is known (ids as in the file, 500.. out of order on purpose):
    500 never valid; 101 the SDC, moving east; 102 moving west, overlapped at step 0 only by 105 (which
    then sits at x = 190); 106 off-road at step 0 only; 104 a pedestrian off the road all along; 199
    the object farthest from the SDC (left out with max_agents = 5)."""
    data = _scene_json()
    pt = lambda x, y: {"x": float(x), "y": float(y), "z": 0.0}  # noqa: E731
    steps = np.arange(91)

    def obj(oid, xs, ys, heading, kind="vehicle", valid=True):
        xs, ys = np.broadcast_to(xs, (91,)), np.broadcast_to(ys, (91,))
        return {"id": oid, "position": [pt(x, y) for x, y in zip(xs, ys, strict=True)],
                "velocity": [pt(0.0, 0.0) for _ in steps], "heading": [heading] * 91, "valid": [valid] * 91,
                "width": 2.0, "length": 4.5, "type": kind, "goalPosition": pt(xs[-1], ys[-1])}

    east, west = 10 + 0.8 * steps, 150 - 0.6 * steps
    data["objects"] = [
        obj(500, east, -2.0, 0.0, valid=False), obj(101, east, -2.0, 0.0), obj(102, west, 2.0, np.pi),
        obj(105, np.where(steps == 0, 150.0, 190.0), 2.0, np.pi),
        obj(106, 120 + 0.5 * steps, np.where(steps == 0, -10.0, -2.0), 0.0),
        obj(104, 100.0, -10.0, 0.0, kind="pedestrian"), obj(199, 195.0, -2.0, 0.0),
    ]
    data["metadata"] = {"sdc_track_index": 1}
    return data


def test_replay_reports_truncation_file_ids_step_zero_and_the_pedestrian_exemption(tmp_path):
    """Objects over max_agents were dropped without a word and ids reported by position after truncation;
    log step 0 was never checked; pedestrians were exempt from off-road without the report saying so."""
    from cp_jax.jobs.replay_logs import replay_logs

    src = tmp_path / "src"
    src.mkdir()
    _write(src, _replay_scene(), "a.json")
    (src / "broken.json").write_text("[1, 2")
    cfg = types.SimConfig(max_agents=5, max_road_segments=256, max_lanes=8, obs_partners=4, obs_road=16,
                          enable_idm=False)
    summary = replay_logs(str(src), str(tmp_path / "out"), cfg)
    written = json.loads((tmp_path / "out" / "replay.json").read_text())
    entry, broken = written["scenes"]  # sorted by name
    assert "broken.json" in broken["skipped"] and summary["replayed"] == 1 and summary["skipped"] == 1
    counts = (entry["objects"], entry["never_valid"], entry["truncated_objects"], entry["truncated_ids"])
    assert counts == (6, 1, 1, [199])  # 199: the farthest from the SDC; 500: never valid
    assert entry["moving"]["collided_ids"] == [102, 105]  # at step 0 only
    assert entry["moving"]["offroad_ids"] == [106]  # at step 0 only
    assert entry["pedestrian"] == dict(objects=1, collided=0, collided_ids=[], offroad=None, offroad_ids=None)
    assert summary["groups"]["pedestrian"]["offroad_rate"] is None and summary["truncated_objects"] == 1
    assert any("offroad is null for pedestrian" in note for note in written["notes"])


# --- damaged caches, the goal coercions, and the launchers' refusals (issue #33, second round) ---


@pytest.fixture(scope="module")
def good_cache(tmp_path_factory):
    """A one-scene cache built by convert (as launch.build_scenes) -> its folder."""
    from cp_jax.jobs import convert

    src = tmp_path_factory.mktemp("src")
    _write(src, _scene_json(), "good.json")
    out = tmp_path_factory.mktemp("built") / "cache"
    assert convert.convert(str(out), SMALL, convert.sources("gpudrive_json", str(src), 0))["converted"] == 1
    return out


def _damaged(good_cache, tmp_path, damage):
    """A copy of good_cache with damage(dataset folder, cache folder) applied -> the copy."""
    import shutil

    from cp_jax.scenarios.cache import ScenarioCacheBuilder

    out = tmp_path / "cache"
    shutil.copytree(good_cache, out)
    (dataset,) = (f.parent for f in (out / ScenarioCacheBuilder.name).glob("*/*/dataset_info.json"))
    damage(dataset, out)
    return out


def _truncate(dataset, _):
    (f,) = dataset.glob("*.array_record*")
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _garble(dataset, _):
    """Bytes inverted inside the first record's chunk (the file's index intact): found when it is read."""
    (f,) = dataset.glob("*.array_record*")
    data = bytearray(f.read_bytes())
    data[2000:6000] = bytes(b ^ 0xFF for b in data[2000:6000])
    f.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, file, why",
    [
        (_truncate, r"\.array_record-00000-of-00001", "truncated or corrupt"),
        (_garble, r"\.array_record-00000-of-00001", "record 0 unreadable"),
        (lambda d, _: [f.unlink() for f in d.glob("*.array_record*")], r"\.array_record-00000-of-00001", "missing"),
        (lambda d, _: (d / "dataset_info.json").unlink(), "dataset_info.json", "missing"),
        (lambda d, _: (d / "dataset_info.json").write_text("{"), "dataset_info.json", "unreadable"),
        (lambda _, c: (c / "sim_config.json").write_text("{\n"), "sim_config.json", "not valid JSON"),
        (lambda _, c: (c / "sim_config.json").write_text("[1]"), "sim_config.json", "expected an object"),
        (lambda _, c: (c / "sim_config.json").write_text('{"max_agentz": 8}'), "sim_config.json", "max_agentz"),
        (lambda _, c: (c / "names.json").write_text("[1,"), "names.json", "not valid JSON"),
    ],
)
def test_a_damaged_cache_names_its_folder_and_the_file_at_fault(good_cache, tmp_path, damage, file, why):
    """A truncated record file read as a TypeError of TFDS, no record file as a RuntimeError, no
    dataset_info.json as a KeyError, a corrupt sim_config.json as a JSONDecodeError: none named the file."""
    from cp_jax.scenarios.cache import ScenarioCache

    out = _damaged(good_cache, tmp_path, damage)
    with pytest.raises(ValueError, match=rf"{re.escape(str(out))}.*{file}.*{why}.*cache {re.escape(str(out))} is "):
        cache = ScenarioCache(str(out))
        cache.names(), cache[0]


@pytest.mark.parametrize(
    "goal, rule",
    [
        ({"x": float("nan"), "y": 2.0}, "nonfinite_goal"),
        ({"x": 1.0, "y": float("inf")}, "nonfinite_goal"),
        (None, "missing_goal"),
        ({"x": None, "y": None}, "missing_goal"),
        ("absent", "missing_goal"),
        ({"x": None, "y": 2.0}, "partial_goal"),
    ],
)
def test_a_goal_taken_from_the_log_is_a_reported_coercion(tmp_path, goal, rule):
    """A NaN goalPosition.x (or no goalPosition) was silently replaced by the final logged position."""
    data = _scene_json()
    if goal == "absent":
        del data["objects"][1]["goalPosition"]
    else:
        data["objects"][1]["goalPosition"] = goal
    raw, notes = _read(tmp_path, data)
    np.testing.assert_allclose(raw.goal[1], raw.log_xy[1, -1])
    assert notes.coerced == {rule: [1]} and set(notes.coerced) <= set(common.COERCIONS)


def _good_scenes(tmp_path):
    """read_scenes' iterator over one good scene file."""
    from cp_jax.jobs import make_splits

    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    _write(src, _scene_json(), "good.json")
    return make_splits.read_scenes("gpudrive_json", str(src))


def test_make_splits_refuses_before_reading_and_writes_nothing_when_nothing_was_read(tmp_path):
    """--format=cache without --src was a TypeError; an --out that is a file a FileExistsError after the
    work; 0 scenes read exited 0 with empty manifests; an --out holding manifests was overwritten."""
    from cp_jax.jobs import make_splits

    with pytest.raises(ValueError, match=r"--src: required with --format=cache"):
        make_splits.read_scenes("cache", None)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=rf"--out={re.escape(str(tmp_path / 'afile'))}: a file"):
        make_splits.check_out(str(tmp_path / "afile"))
    bad = [("a.json", None, "SceneError: ..."), ("b.json", None, "SceneError: ...")]
    with pytest.raises(make_splits.NothingRead, match=r"no scene read \(2 skipped"):
        make_splits.write_splits(str(tmp_path / "none"), iter(bad), 5, 0)
    assert not (tmp_path / "none").exists()
    out = tmp_path / "splits"
    make_splits.write_splits(str(out), _good_scenes(tmp_path), 5, 0)
    assert sorted(os.listdir(out)) == sorted(make_splits.MANIFESTS)
    with pytest.raises(ValueError, match=r"already holds all_pairs.csv, interactive.csv, random.csv: give --overwrite"):
        make_splits.check_out(str(out))
    make_splits.check_out(str(out), overwrite=True)


def test_make_splits_moves_the_manifests_into_place_only_when_all_are_complete(tmp_path, monkeypatch):
    """A failure while writing the third manifest left a new all_pairs.csv beside the old splits."""
    from cp_jax.jobs import make_splits
    from cp_jax.scenarios import splits

    out = tmp_path / "splits"
    make_splits.write_splits(str(out), _good_scenes(tmp_path), 5, 0)
    before = {name: (out / name).read_bytes() for name in make_splits.MANIFESTS}
    write = splits.write_manifest

    def failing(path, pairs):
        if os.path.basename(path).startswith(".random"):
            raise OSError("disk full")
        write(path, pairs)

    monkeypatch.setattr(splits, "write_manifest", failing)
    with pytest.raises(OSError, match="disk full"):
        make_splits.write_splits(str(out), _good_scenes(tmp_path), 1, 0)
    assert {name: (out / name).read_bytes() for name in make_splits.MANIFESTS} == before


def test_replay_logs_and_scene_stats_refuse_an_out_holding_their_result(tmp_path, good_cache):
    """replay.json and scene_stats.json were silently replaced; refused now before any scene is read (the
    src below does not exist), unless overwrite."""
    from cp_jax.jobs import replay_logs, scene_stats

    out = tmp_path / "out"
    out.mkdir()
    (out / "replay.json").write_text("{}")
    (out / "scene_stats.json").write_text("{}")
    with pytest.raises(ValueError, match=r"already holds replay.json: give --overwrite"):
        replay_logs.replay_logs(str(tmp_path / "nowhere"), str(out), SMALL)
    with pytest.raises(ValueError, match=r"--src='.*nowhere': not a folder"):  # past the check
        replay_logs.replay_logs(str(tmp_path / "nowhere"), str(out), SMALL, overwrite=True)
    with pytest.raises(ValueError, match=r"already holds scene_stats.json: give --overwrite"):
        scene_stats.scene_stats({"x": ("cache", str(tmp_path / "nowhere"))}, str(out), SMALL)
    with pytest.raises(ValueError, match=r"scene set '.*nowhere': not a folder"):
        scene_stats.scene_stats({"x": ("cache", str(tmp_path / "nowhere"))}, str(out), SMALL, overwrite=True)
    damaged = _damaged(good_cache, tmp_path, lambda _, c: (c / "sim_config.json").write_text("{"))
    with pytest.raises(ValueError, match=r"sim_config.json: not valid JSON"):
        scene_stats.scene_stats({"x": ("cache", str(damaged))}, str(out), SMALL, overwrite=True)
    assert (out / "replay.json").read_text() == (out / "scene_stats.json").read_text() == "{}"


@pytest.mark.parametrize("n, agents, seed, flag", [(0, 12, 0, "--procedural_scenes=0"), (2, 0, 0, "--agents=0"),
                                                   (2, 3, -1, "--seed=-1")])
def test_procedural_counts_below_their_minimum_are_refused_before_any_scene(n, agents, seed, flag):
    """--procedural_scenes=0 and --agents=0 created OUT and ended 'no scene converted' (exit 1)."""
    from cp_jax.jobs import convert

    with pytest.raises(ValueError, match=rf"{flag}: must be >= "):
        convert.sources("procedural", None, n, procedural=convert.Procedural(seed=seed, agents=agents))


# launcher, arguments (W: a folder that must not be created), what the one usage line names
USAGE = [
    ("build_scenes", ["--src=W", "--out=W", "--workers=0"], "--workers=0"),
    ("build_scenes", ["--format=procedural", "--out=W", "--shards=-1"], "--shards=-1"),
    ("render_scenes", ["--out=W", "--seeds=5:2"], "--seeds=5:2: expected START:STOP with 0 <= START < STOP"),
    ("render_scenes", ["--out=W", "--agents=0"], "--agents=0"),
]


def test_launcher_counts_and_ranges_are_one_usage_line(tmp_path):
    """--workers=0 / --shards=-1 were accepted; --seeds=5:2 drew nothing with exit 0, --agents=0 was a
    traceback (as --seeds=-2:-1, refused by the same check). Now one line with exit 2 naming the flag,
    before W is created; four processes, two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def one(k):
        launcher, args, _ = USAGE[k]
        work = tmp_path / f"w{k}"
        return (*_run(f"launch.{launcher}", *(a.replace("=W", f"={work}") for a in args)), work)

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(one, range(len(USAGE))))
    for (launcher, _, named), (code, text, work) in zip(USAGE, answers, strict=True):
        lines = text.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"launch.{launcher}: error: "), text[-2000:]
        assert named in lines[0] and not work.exists(), lines[0]
