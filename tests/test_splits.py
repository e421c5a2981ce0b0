"""Splits: ego eligibility, each part of the interactivity score, the two splits, manifests."""

import csv
import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cp_jax.scenarios import splits
from cp_jax.scenarios.splits import Pair
from cp_jax.sim import types
from tests.worlds import straight_road

ROOT = Path(__file__).resolve().parents[1]
WOMD = Path(__file__).resolve().parents[2] / "shared" / "data" / "womd_json"
EAST, WEST, NORTH = 0.0, math.pi, math.pi / 2

# Three cars eastbound at 10 m/s (20 m in 2 s): all eligible.
BASE = [(0.0, -2.0, EAST, 10.0), (30.0, -2.0, EAST, 10.0), (60.0, -2.0, EAST, 10.0)]


def replace(raw, **fields):
    return dataclasses.replace(raw, **fields)


# ---------------------------------------------------------------------------------------------
# Eligibility


def test_all_eligible_in_base_scene():
    assert splits.eligible_egos(straight_road(BASE)).tolist() == [0, 1, 2]


def test_short_car_not_eligible():
    raw = straight_road(BASE)
    size = raw.size.copy()
    size[1, 0] = 2.9
    assert splits.eligible_egos(replace(raw, size=size)).tolist() == [0, 2]


def test_too_close_goal_not_eligible():
    goals = [(100.0, -2.0), (39.0, -2.0), (70.1, -2.0)]  # 100, 9, 10.1 m from the starts
    assert splits.eligible_egos(straight_road(BASE, goals=goals)).tolist() == [0, 2]


def test_fewer_than_three_agents_valid_at_t0():
    assert len(splits.eligible_egos(straight_road(BASE[:2]))) == 0
    raw = straight_road(BASE)
    valid = raw.log_valid.copy()
    valid[2, :5] = False  # the third appears later: only two valid at t0
    assert len(splits.eligible_egos(replace(raw, log_valid=valid))) == 0


def test_pedestrian_uncontrollable_and_late_not_eligible():
    raw = straight_road(BASE + [(90.0, -2.0, EAST, 10.0), (120.0, -2.0, EAST, 10.0)])
    obj_type = raw.obj_type.copy()
    obj_type[1] = types.PEDESTRIAN
    controllable = raw.controllable.copy()
    controllable[2] = False
    valid = raw.log_valid.copy()
    valid[3, 0] = False
    raw = replace(raw, obj_type=obj_type, controllable=controllable, log_valid=valid)
    assert splits.eligible_egos(raw).tolist() == [0, 4]


# ---------------------------------------------------------------------------------------------
# Score parts


def test_crossing_paths_counted_once_parallel_and_following_not():
    # Ego east along y=-2 (x 0..40); one car crosses it northbound at x=20 a second after the ego
    # passed; one drives parallel 3.5 m to the side; one follows the ego on its line.
    raw = straight_road(
        [(0.0, -2.0, EAST, 10.0), (20.0, -32.0, NORTH, 10.0), (0.0, -5.5, EAST, 10.0), (-10.0, -2.0, EAST, 10.0)],
        steps=41,
    )
    parts = splits.interactivity(raw, 0)
    assert parts["crossings"] == 1
    assert parts["term_crossings"] == pytest.approx(0.25)
    assert splits.interactivity(raw, 1)["crossings"] == 3  # the crossing car crosses all three
    assert splits.interactivity(raw, 2)["crossings"] == 1
    assert splits.interactivity(straight_road([BASE[0], (0.0, -5.5, EAST, 10.0)]), 0)["crossings"] == 0


def test_path_intersection_rules():
    a0, a1 = np.array([[0.0, 0.0]]), np.array([[10.0, 0.0]])
    assert splits.paths_intersect(a0, a1, np.array([[5.0, -5.0]]), np.array([[5.0, 5.0]]))  # 90 deg
    assert not splits.paths_intersect(a0, a1, np.array([[0.0, 1.0]]), np.array([[10.0, 1.0]]))  # parallel
    assert not splits.paths_intersect(a0, a1, np.array([[2.0, 0.0]]), np.array([[12.0, 0.0]]))  # collinear
    assert not splits.paths_intersect(a0, a1, np.array([[5.0, 0.0]]), np.array([[5.0, 0.0]]))  # a point
    shallow = np.radians(5.0)  # a weave across the ego's line at 5 degrees: noise, not a crossing
    b0 = np.array([[0.0, -0.2]])
    b1 = b0 + 10 * np.array([[np.cos(shallow), np.sin(shallow)]])
    assert not splits.paths_intersect(a0, a1, b0, b1)
    assert splits.paths_intersect(a0, a1, b0, b1, min_angle_deg=0.0)
    assert not splits.paths_intersect(a0, a1, np.array([[5.0, 1.0]]), np.array([[5.0, 5.0]]))  # misses


def test_ttc_head_on_counts_following_at_equal_speed_does_not():
    # Head-on in the two lanes, 60 m apart, closing at 20 m/s: TTC < 2.8 s at every one of 21 steps.
    head_on = straight_road([(0.0, -2.0, EAST, 10.0), (60.0, 2.0, WEST, 10.0)])
    assert splits.interactivity(head_on, 0)["ttc_steps"] == 21
    assert splits.interactivity(head_on, 0)["term_ttc_steps"] == pytest.approx(21 / 60)
    following = straight_road([(0.0, -2.0, EAST, 10.0), (10.0, -2.0, EAST, 10.0), (-10.0, -2.0, EAST, 10.0)])
    assert splits.interactivity(following, 0)["ttc_steps"] == 0
    # Far apart (200 m, TTC > 9 s): nothing; a slower car 20.25 m ahead (closing 5 m/s, TTC 3.15 s
    # falling to 1.15 s) counts from the first step whose TTC is < 3 s.
    far = straight_road([(0.0, -2.0, EAST, 10.0), (200.0, 2.0, WEST, 10.0)])
    assert splits.interactivity(far, 0)["ttc_steps"] == 0
    slower = straight_road([(0.0, -2.0, EAST, 10.0), (20.25, -2.0, EAST, 5.0)])
    gaps = 20.25 - 4.5 - 0.5 * np.arange(21)  # bumper gap shrinks 0.5 m per step
    assert splits.interactivity(slower, 0)["ttc_steps"] == int(np.sum(gaps / 5.0 < 3.0))


def test_density_counts_others_within_40m_at_t0():
    starts = [(100.0, -2.0, EAST, 10.0)]
    starts += [(100.0 + dx, 2.0, WEST, 0.0) for dx in (-39.0, -20.0, 5.0, 25.0, 39.5)]  # 5 within 40 m
    starts += [(100.0 + dx, 2.0, WEST, 0.0) for dx in (-60.0, 45.0)]  # 2 beyond
    raw = straight_road(starts)
    parts = splits.interactivity(raw, 0)
    assert parts["density"] == 5 and parts["term_density"] == pytest.approx(0.5)
    valid = raw.log_valid.copy()
    valid[1, 0] = False  # not valid at t0: not counted
    assert splits.interactivity(replace(raw, log_valid=valid), 0)["density"] == 4


def test_goal_distance_term():
    for goal_x, term in ((60.0, 0.5), (10.0, 0.0), (5.0, 0.0), (150.0, 1.0)):
        raw = straight_road(BASE, goals=[(goal_x, -2.0), (50.0, -2.0), (80.0, -2.0)])
        parts = splits.interactivity(raw, 0)
        assert parts["goal_dist"] == pytest.approx(goal_x)
        assert parts["term_goal_dist"] == pytest.approx(term)


def test_lane_mult_straight_road_goal_on_own_lane():
    raw = straight_road(BASE)
    parts = splits.interactivity(raw, 0)
    assert parts["lane_mult"] == 0.5
    total = sum(w * parts[f"term_{name}"] for name, w, _ in splits.TERMS)
    assert parts["score"] == pytest.approx(0.5 * total)
    off_lane = straight_road(BASE, goals=[(60.0, 30.0), (50.0, -2.0), (80.0, -2.0)])  # goal off every lane
    assert splits.interactivity(off_lane, 0)["lane_mult"] == 1.0


def test_lane_mult_follows_straight_successors_not_turns():
    # Lane 0 east x 0..50 -> lane 1 east x 50..100 (straight on) or lane 2 bearing 45 deg left.
    xs = np.linspace(0.0, 50.0, 11)
    lane0 = np.stack([xs, np.full_like(xs, -2.0)], -1)
    lane1 = lane0 + np.array([50.0, 0.0])
    d = np.linspace(0.0, 60.0, 13)
    lane2 = np.array([50.0, -2.0]) + np.stack([d, d], -1) / np.sqrt(2.0)
    lanes = [lane0, lane1, lane2]
    graph = dict(lanes=lanes, lane_succ=[[1, 2], [], []], lane_left=[-1] * 3, lane_right=[-1] * 3)
    ahead = replace(straight_road(BASE, goals=[(80.0, -2.0), (60.0, -2.0), (90.0, -2.0)]), **graph)
    assert splits.goal_on_own_lane(ahead, 0)
    assert splits.interactivity(ahead, 0)["lane_mult"] == 0.5
    turn_goal = tuple(lane2[8])
    turned = replace(straight_road(BASE, goals=[turn_goal, (60.0, -2.0), (90.0, -2.0)]), **graph)
    assert not splits.goal_on_own_lane(turned, 0)
    assert splits.interactivity(turned, 0)["lane_mult"] == 1.0
    unlinked = replace(ahead, lane_succ=[[2], [], []])  # lane 1 no longer follows lane 0
    assert splits.interactivity(unlinked, 0)["lane_mult"] == 1.0


def test_steer_and_accel_change_from_logs():
    # A cruising neighbour adds nothing; a weaving one adds |yaw-rate changes|, a braking one
    # |acceleration changes|, each weighted by 1 / its closest distance to the ego.
    raw = straight_road([(0.0, -2.0, EAST, 10.0), (5.0, 2.0, WEST, 10.0), (40.0, -2.0, EAST, 10.0)])
    quiet = splits.interactivity(raw, 0)
    assert quiet["accel_change"] == 0.0 and quiet["steer_change"] == 0.0
    w = 1.0 / np.min(np.linalg.norm(raw.log_xy[1] - raw.log_xy[0], axis=-1))  # about 4 m, when passing
    yaw = raw.log_yaw.copy()
    yaw[1, ::2] += 0.05  # yaw rate +-0.5 rad/s flipping every step: 19 changes of 1 rad/s
    weave = splits.interactivity(replace(raw, log_yaw=yaw), 0)
    assert weave["steer_change"] == pytest.approx(w * 19.0, rel=1e-6)
    assert weave["term_steer_change"] == 1.0  # the 0.1 normaliser saturates quickly
    vel = raw.log_vel.copy()
    vel[1, 10:] *= 0.5  # one speed drop 10 -> 5 m/s: accel 0 -> -50 -> 0 m/s^2
    brake = splits.interactivity(replace(raw, log_vel=vel), 0)
    assert brake["accel_change"] == pytest.approx(w * 100.0, rel=1e-6)
    assert brake["term_accel_change"] == pytest.approx(min(w * 100.0 / 60.0, 1.0))
    assert brake["steer_change"] == 0.0


def test_score_bounded_and_finite_in_degenerate_scenes():
    rng = np.random.default_rng(0)
    starts = [(float(x), float(y), float(h), float(v)) for x, y, h, v in
              zip(rng.uniform(0, 80, 40), rng.uniform(-30, 30, 40), rng.uniform(-3, 3, 40), rng.uniform(0, 20, 40),
                  strict=True)]
    starts[1] = starts[0]  # two objects in the same place: distance 0, TTC 0
    raw = straight_road(starts, steps=31)
    valid = raw.log_valid.copy()
    valid[2:6, ::3] = False  # gappy logs
    valid[6] = False  # never valid
    yaw = raw.log_yaw.copy()
    yaw[7] = rng.uniform(-np.pi, np.pi, yaw.shape[1])  # a spinning pedestrian-like heading
    raw = replace(raw, log_valid=valid, log_yaw=yaw)
    for ego in range(raw.num_objects):
        parts = splits.interactivity(raw, ego)
        assert all(np.isfinite(float(v)) for v in parts.values()), parts
        assert 0.0 <= parts["score"] <= 1.0
        for name, _, _ in splits.TERMS:
            assert 0.0 <= parts[f"term_{name}"] <= 1.0
    lone = straight_road([BASE[0]])  # no others at all
    assert splits.interactivity(lone, 0)["score"] == pytest.approx(0.5 * 0.1 * (20.0 - 10.0) / 100.0)


def test_score_scenes_pairs_for_eligible_egos():
    raws = [straight_road(BASE, name="a"), straight_road(BASE[:2], name="b"), straight_road(BASE, name="c")]
    pairs = splits.score_scenes(raws, ["A", "B", "C"])
    assert [(p.scene_id, p.ego) for p in pairs] == [("A", 0), ("A", 1), ("A", 2), ("C", 0), ("C", 1), ("C", 2)]
    assert pairs[0].score == pytest.approx(splits.interactivity(raws[0], 0)["score"])
    assert [p.scene_id for p in splits.score_scenes(raws)][:1] == ["a"]
    with pytest.raises(ValueError, match="scene_ids"):
        splits.score_scenes(raws, ["A"])


# ---------------------------------------------------------------------------------------------
# Splits and manifests


def _pairs(count=40, seed=1):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.uniform(0, 1, count), 2)  # rounding makes ties
    return [Pair(f"s{i % 7}", i, float(s)) for i, s in enumerate(scores)]


def test_interactive_split_is_top_n_and_deterministic():
    pairs = _pairs()
    top = splits.interactive_split(pairs, 10)
    assert len(top) == 10 and top.warning == ""
    cutoff = min(p.score for p in top)
    assert all(p.score <= cutoff for p in pairs if p not in top)
    assert [p.score for p in top] == sorted((p.score for p in top), reverse=True)
    shuffled = [pairs[i] for i in np.random.default_rng(5).permutation(len(pairs))]
    assert splits.interactive_split(shuffled, 10) == top
    tied = [Pair("b", 1, 0.5), Pair("a", 2, 0.5), Pair("a", 1, 0.5), Pair("c", 0, 0.9)]
    assert splits.interactive_split(tied, 3) == [Pair("c", 0, 0.9), Pair("a", 1, 0.5), Pair("a", 2, 0.5)]
    short = splits.interactive_split(tied, 10)
    assert len(short) == 4 and short.requested == 10 and "only 4" in short.warning


def test_random_split_is_seeded():
    pairs = _pairs()
    a = splits.random_split(pairs, 10, seed=0)
    assert len(a) == 10 and len(set(a)) == 10 and set(a) <= set(pairs) and a.warning == ""
    assert splits.random_split(pairs, 10, seed=0) == a
    assert splits.random_split(list(reversed(pairs)), 10, seed=0) == a  # input order does not matter
    assert splits.random_split(pairs, 10, seed=1) != a
    everything = splits.random_split(pairs, 100, seed=0)
    assert sorted(everything) == sorted(pairs) and "only 40" in everything.warning
    assert splits.random_split([], 5, seed=0) == []


def test_manifest_round_trip(tmp_path):
    pairs = [Pair("scene-1", 3, 0.123456789), Pair("wo-00001-of-01000_307", 0, 1.0), Pair("x,y", 2, 0.0)]
    path = tmp_path / "m.csv"
    splits.write_manifest(path, pairs)
    lines = path.read_text().splitlines()
    assert lines[0] == "scene_id,ego,score" and lines[1] == "scene-1,3,0.123457"
    back = splits.read_manifest(path)
    assert [(p.scene_id, p.ego) for p in back] == [(p.scene_id, p.ego) for p in pairs]
    assert all(abs(b.score - p.score) <= 5e-7 for b, p in zip(back, pairs, strict=True))
    assert isinstance(back[0].ego, int)
    bad = tmp_path / "bad.csv"
    bad.write_text("scene,ego,score\na,1,0.5\n")
    with pytest.raises(ValueError, match="header"):
        splits.read_manifest(bad)
    bad.write_text("scene_id,ego,score\na,one,0.5\n")
    with pytest.raises(ValueError, match="line 2"):
        splits.read_manifest(bad)


# ---------------------------------------------------------------------------------------------
# Real scenes and the command


def test_real_scenes():
    if not WOMD.is_dir():
        pytest.skip(f"real WOMD JSON scenes not found at {WOMD}")
    from cp_jax.scenarios.readers import gpudrive_json

    files = sorted(WOMD.glob("*.json"))
    raws = [gpudrive_json.read(str(f))[0] for f in files]
    pairs = splits.score_scenes(raws, [f.stem for f in files])
    assert len(pairs) >= 20
    scores = np.array([p.score for p in pairs])
    assert np.isfinite(scores).all() and (scores >= 0).all() and (scores <= 1).all()
    top = splits.interactive_split(pairs, 10)
    rand = splits.random_split(pairs, 10, seed=0)
    assert np.mean([p.score for p in top]) > np.mean([p.score for p in rand])


def test_make_splits_command_on_procedural_scenes(tmp_path):
    out = tmp_path / "splits"
    cmd = [sys.executable, "-m", "launch.make_splits", "--format=procedural", "--procedural_scenes=7",
           "--n=5", "--seed=0", f"--out={out}"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "scenes read 7, skipped 0" in res.stdout, res.stdout
    manifests = {}
    for name in ("all_pairs", "interactive", "random"):
        with open(out / f"{name}.csv", newline="") as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["scene_id", "ego", "score"]
        manifests[name] = splits.read_manifest(out / f"{name}.csv")
    everything = manifests["all_pairs"]
    assert len(everything) >= 5
    assert len(manifests["interactive"]) == len(manifests["random"]) == 5
    assert manifests["interactive"] == splits.interactive_split(everything, 5)
    assert set(manifests["random"]) <= set(everything)
    kinds = {p.scene_id.rsplit("_", 1)[0] for p in everything}
    assert len(kinds) >= 4  # the layout kinds are cycled
