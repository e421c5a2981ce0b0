"""Benchmark metrics: the at-fault classifier on constructed collisions, sub-scores, episode metrics.

Most collisions are driven through the real simulator (reset + rollout with kept states) on the
straight road of tests/worlds.py (edges y = +-4; lane 0 eastbound at y = -2, lane 1 westbound at
y = +2, or eastbound too where a test needs two lanes one way); cars are 4.5 x 2 m. Each car follows
a fixed per-step table of discrete actions. The rule-priority table at the end uses hand-built
records for the combinations the simulator cannot stage cleanly.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.bench import metrics as bm
from cp_jax.scenarios.builder import build_scenario
from cp_jax.sim import conditions, env, geometry, types
from tests.worlds import small_config, straight_road

CFG = small_config(enable_idm=False)
PARAMS = types.default_params()
A, N = CFG.max_agents, CFG.episode_steps
KEEP = 45  # accel 0, steer 0; + j: steer j / 6 of full lock (j > 0: left); + 13 i: accel i * 4/3 m/s^2
FAR = (190.0, -2.0)  # a goal nobody reaches


def _table_policy(table, obs, state, key):
    return table[jnp.minimum(state.t, N - 1)]


@jax.jit
def _episode(scenario, controller, table):
    s0 = env.reset(scenario, jax.random.PRNGKey(0), conditions.style("normal"), CFG, controller)
    final, traj = env.rollout(_table_policy, table, s0, scenario, PARAMS, CFG, N, keep_states=True)
    return bm.record_from_states(env.stack_states(traj.state, final), final)


@jax.jit
def _evaluate(rec, scenario, ego):
    return (
        bm.at_fault(rec, scenario, ego, CFG),
        bm.collision_features(rec, scenario, ego, CFG),
        bm.episode_metrics(rec, scenario, ego, CFG),
    )


def two_eastbound_lanes(raw):
    """Lane 1 (y = +2) made eastbound: a two-lane one-way road, lane 1 left of lane 0."""
    raw.lanes = [raw.lanes[0], raw.lanes[0] + np.array([0.0, 4.0])]
    raw.lane_left, raw.lane_right = [1, -1], [-1, 0]
    raw.routes = [[0] if y < 0 else [1] for y in raw.log_xy[:, 0, 1]]


def simulate(starts, actions=None, goals=None, controller=None, edit=None):
    """Roll a straight-road scene for N steps. starts: (x, y, yaw, speed) per agent; actions: agent ->
    action or [N] actions (default KEEP); controller: [A] ids (default POLICY). -> (scenario, record)."""
    raw = straight_road(starts, goals=goals or [FAR] * len(starts), length=200.0, steps=CFG.log_steps)
    if edit is not None:
        edit(raw)
    scenario = build_scenario(raw, CFG)
    table = np.full((N, A), KEEP, np.int32)
    for agent, act in (actions or {}).items():
        table[:, agent] = act
    ctrl = np.full(A, types.POLICY, np.int32) if controller is None else np.asarray(controller, np.int32)
    return scenario, _episode(scenario, jnp.asarray(ctrl), jnp.asarray(table))


def evaluate(scenario, rec, ego):
    fault, feats, metrics = _evaluate(rec, scenario, jnp.int32(ego))
    return bool(fault), {k: np.asarray(v).item() for k, v in feats.items()}, {k: float(v) for k, v in metrics.items()}


def collided_with(rec, ego, partner):
    t = int(rec.first_collision_t[ego])
    assert t < types.INF_T, f"agent {ego} never collided"
    assert int(rec.collision_partner[ego]) == partner
    return t


# ----------------------------------------------------------------------------- through the simulator


def test_record_rows_follow_the_step_convention():
    # Head-on in one lane, closing at 20 m/s from a 5.5 m gap: the boxes first overlap in state 3.
    sc, rec = simulate([(50, -2, 0, 10), (60, -2, np.pi, 10)])
    t = collided_with(rec, 0, 1)
    assert t == 3 and rec.xy.shape == (N + 1, A, 2)
    overlap = lambda row: bool(geometry.overlap_matrix(rec.xy[row], rec.yaw[row], sc.size)[0, 1])  # noqa: E731
    assert overlap(t) and not overlap(t - 1)
    assert bool(rec.alive[t - 1, 0]) and not bool(rec.alive[t, 0])  # removed by the event in row t
    np.testing.assert_allclose(np.asarray(rec.xy[t, 0]), [50 + 3.0, -2.0], atol=1e-4)  # pose of the colliding step
    np.testing.assert_allclose(float(rec.speed[t, 0]), 10.0, atol=1e-4)
    # Head-on is frontal for both (bearing 0, closing 20 m/s): both at fault.
    for ego in (0, 1):
        fault, f, m = evaluate(sc, rec, ego)
        assert f["bearing"] < 1.0 and f["closing"] == pytest.approx(20.0, abs=0.1)
        assert fault and m["at_fault"] == 1.0 and m["non_at_fault"] == 0.0 and m["collision"] == 1.0


def test_rear_end():
    # Ego at 10 m/s closes on a car doing 3 m/s 10.5 m ahead in its lane.
    sc, rec = simulate([(30, -2, 0, 10), (45, -2, 0, 3)])
    collided_with(rec, 0, 1)
    fault, f, _ = evaluate(sc, rec, 0)
    assert f["bearing"] < 1.0 and f["closing"] == pytest.approx(7.0, abs=0.1)
    assert fault  # ego hit the car ahead
    fault, f, m = evaluate(sc, rec, 1)
    assert f["bearing"] > 179.0 and not f["straddling"]
    assert not fault and m["non_at_fault"] == 1.0  # hit from behind


def test_hitting_a_stopped_car():
    # At speed: the stopped car ahead (a policy car holding speed 0, its goal far away).
    sc, rec = simulate([(30, -2, 0, 10), (45, -2, 0, 0)])
    collided_with(rec, 0, 1)
    assert float(np.max(np.abs(rec.speed[:, 1]))) == 0.0
    assert evaluate(sc, rec, 0)[0]
    # Creeping at 0.4 m/s into it: too slow for the frontal rule (closing <= 0.5 m/s), so only the
    # stopped-partner rule makes it the ego's fault.
    sc, rec = simulate([(40, -2, 0, 0.4), (44.6, -2, 0, 0)])
    collided_with(rec, 0, 1)
    fault, f, _ = evaluate(sc, rec, 0)
    assert f["partner_stopped"] and f["closing"] < bm.CLOSING_SPEED and not f["straddling"]
    assert fault
    assert not evaluate(sc, rec, 1)[0]  # the stopped car is not at fault


def test_stopped_ego_is_not_at_fault_even_when_hit_head_on():
    # The ego stands still in its lane; a wrong-way car drives into its front (bearing 0, closing
    # 10 m/s: the frontal rule alone would blame the ego).
    sc, rec = simulate([(60, -2, 0, 0), (75, -2, np.pi, 10)])
    collided_with(rec, 0, 1)
    fault, f, m = evaluate(sc, rec, 0)
    assert f["bearing"] < 1.0 and f["closing"] > 5.0 and f["ego_stopped"]
    assert not fault and m["non_at_fault"] == 1.0
    assert evaluate(sc, rec, 1)[0]  # the other car hit a stopped car


def test_hitting_a_pedestrian_is_at_fault():
    # A pedestrian (log replay) walks at 2 m/s into the side of a lane-keeping ego: by geometry a
    # lateral contact the ego would not be blamed for, but pedestrians always make it the ego's fault.
    def pedestrian(raw):
        raw.obj_type[1] = types.PEDESTRIAN
        raw.size[1] = (0.8, 0.8)

    ctrl = [types.POLICY, types.LOG] + [types.POLICY] * (A - 2)
    sc, rec = simulate([(50, -2, 0, 5), (53, 0.5, -np.pi / 2, 2)], controller=ctrl, edit=pedestrian)
    collided_with(rec, 0, 1)
    fault, f, _ = evaluate(sc, rec, 0)
    assert bm.FRONT_BEARING < f["bearing"] < bm.REAR_BEARING and not f["straddling"]
    assert f["partner_vru"] and fault


def test_side_swipe_lane_changer_at_fault_lane_keeper_not():
    # Two eastbound lanes; ego 0 (right lane) steers left into car 1 driving alongside in the left lane,
    # half a metre behind: both see the other at a bearing of about 80 deg (lateral contact). (A car
    # that cuts in further ahead is hit by the other's front: bearing < 60 deg, the keeper's fault.)
    sc, rec = simulate([(50, -2, 0, 10), (49.5, 2, 0, 10)], actions={0: KEEP + 3}, edit=two_eastbound_lanes)
    collided_with(rec, 0, 1)
    fault, f, _ = evaluate(sc, rec, 0)
    assert bm.FRONT_BEARING < f["bearing"] < bm.REAR_BEARING  # a lateral contact
    assert f["straddling"] and f["drift"] > bm.DRIFT
    assert fault
    fault, f, m = evaluate(sc, rec, 1)  # the lane keeper, hit on its side
    assert bm.FRONT_BEARING < f["bearing"] < bm.REAR_BEARING
    assert not f["straddling"] and f["drift"] < 0.01
    assert not fault and m["non_at_fault"] == 1.0


# ----------------------------------------------------------------------------- sub-scores, episode metrics


def test_clean_episode_scores_100_and_outcomes_partition():
    # test_env: at 10 m/s from x = 10 the goal at x = 30 is reached in state 19.
    sc, rec = simulate([(10, -2, 0, 10)], goals=[(30, -2)])
    assert int(rec.goal_t[0]) == 19
    _, _, m = evaluate(sc, rec, 0)
    assert set(m) == set(bm.METRIC_KEYS)
    assert m["goal"] == m["clean"] == 1.0
    for key in ("comfort", "lane_align", "lane_center"):
        assert m[key] == pytest.approx(1.0, abs=1e-3)
    assert m["score"] == pytest.approx(100.0, abs=0.1)
    assert m["mean_speed"] == pytest.approx(10.0, abs=1e-3)  # it keeps its 10 m/s
    # A collision: score 0, exactly one outcome.
    sc, rec = simulate([(50, -2, 0, 10), (60, -2, np.pi, 10)])
    _, _, m = evaluate(sc, rec, 0)
    assert m["clean"] == m["score"] == m["goal"] == 0.0
    assert m["goal"] + m["timeout"] + m["at_fault"] + m["non_at_fault"] + m["offroad"] == 1.0
    # A timeout: no event.
    sc, rec = simulate([(10, -2, 0, 5)])
    _, _, m = evaluate(sc, rec, 0)
    assert m["timeout"] == 1.0 and m["score"] == 0.0
    assert m["mean_speed"] == pytest.approx(5.0, abs=1e-3)


def test_offroad_outcome_and_collision_wins_a_tie():
    # Steering hard right off the road (edge at y = -4).
    sc, rec = simulate([(50, -2, 0, 10)], actions={0: KEEP - 6})
    assert int(rec.first_offroad_t[0]) < types.INF_T
    _, _, m = evaluate(sc, rec, 0)
    assert m["offroad"] == 1.0 and m["collision"] == 0.0 and m["clean"] == 0.0
    # Same step collision and off-road: a collision (cp_jax.sim.metrics.outcomes).
    tied = rec.replace(first_collision_t=rec.first_offroad_t, collision_partner=jnp.full((A,), 1, jnp.int32))
    _, _, m = evaluate(sc, tied, 0)
    assert m["collision"] == 1.0 and m["offroad"] == 0.0


def test_subscores_fall_for_zigzag_and_harsh_braking():
    start = [(20, -2, 0, 10)]
    _, _, smooth = evaluate(*simulate(start), 0)
    zig = np.where((np.arange(N) // 5) % 2 == 0, KEEP + 4, KEEP - 4)
    sc, rec = simulate(start, actions={0: zig})
    assert int(rec.first_offroad_t[0]) == types.INF_T
    _, _, zigzag = evaluate(sc, rec, 0)
    brake = np.where(np.arange(N) < 6, KEEP - 3 * 13, KEEP)
    _, _, braking = evaluate(*simulate(start, actions={0: brake}), 0)
    for key in ("comfort", "lane_align", "lane_center"):
        assert smooth[key] == pytest.approx(1.0, abs=1e-3)
        assert zigzag[key] < smooth[key] - 0.05, key
    assert braking["comfort"] < 0.9
    assert braking["lane_align"] == pytest.approx(1.0, abs=1e-3)
    assert braking["lane_center"] == pytest.approx(1.0, abs=1e-3)


def test_metrics_vmap_over_episodes():
    scenes = [simulate([(30, -2, 0, 10), (45, -2, 0, 3)]), simulate([(10, -2, 0, 10)], goals=[(30, -2)])]
    stack = lambda *xs: jax.tree.map(lambda *x: jnp.stack(x), *xs)  # noqa: E731
    sc = stack(*(s for s, _ in scenes))
    rec = stack(*(r for _, r in scenes))
    batched = jax.jit(jax.vmap(functools.partial(bm.episode_metrics, cfg=CFG)))(rec, sc, jnp.array([1, 0]))
    for i, (s, r) in enumerate(scenes):
        _, _, m = evaluate(s, r, [1, 0][i])
        for k in bm.METRIC_KEYS:
            assert float(batched[k][i]) == pytest.approx(m[k], abs=1e-5), k


# ----------------------------------------------------------------------------- hand-built records

ROW = 10  # collision row of the hand-built records


def hand_record(ego_speed, offset, lat_speed, rel, partner_speed, partner_rel_yaw=0.0, collided=True):
    """Ego 0 and partner 1 colliding in row ROW on the straight road (other slots empty).

    The ego drives east at ego_speed; from row 4 on it also moves left at lat_speed m/s, so that in
    row ROW its centre is `offset` m left of lane 0's centre (y = -2). The partner sits at rel [2] in
    the ego frame in row ROW, heading ego yaw + partner_rel_yaw at partner_speed. Both are alive in
    rows 0..ROW-1 (removed by the collision in row ROW)."""
    t1 = N + 1
    t = np.arange(t1, dtype=np.float64)
    y = -2.0 + offset + 0.1 * lat_speed * (np.maximum(t, 4) - ROW)
    ego_xy = np.stack([40 + 0.1 * ego_speed * t, y], -1)
    ego_yaw = np.where(t >= 4, np.arctan2(lat_speed, max(ego_speed, 1e-3)), 0.0)
    c, s = np.cos(ego_yaw[ROW]), np.sin(ego_yaw[ROW])
    p_xy = ego_xy[ROW] + np.array([c * rel[0] - s * rel[1], s * rel[0] + c * rel[1]])
    xy = np.full((t1, A, 2), -100.0)
    xy[:, 0], xy[:, 1] = ego_xy, p_xy
    yaw = np.zeros((t1, A))
    yaw[:, 0], yaw[:, 1] = ego_yaw, ego_yaw[ROW] + partner_rel_yaw
    speed = np.zeros((t1, A))
    speed[:, 0], speed[:, 1] = ego_speed, partner_speed
    alive = np.zeros((t1, A), bool)
    alive[:ROW, :2] = True
    never = np.full(A, types.INF_T, np.int32)
    first_c, partner = never.copy(), np.full(A, -1, np.int32)
    if collided:
        first_c[:2], partner[:2] = ROW, (1, 0)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return bm.EpisodeRecord(
        xy=f32(xy), yaw=f32(yaw), speed=f32(speed), alive=jnp.asarray(alive),
        accel=f32(np.zeros((t1, A))), lat_accel=f32(np.zeros((t1, A))),
        goal_t=jnp.asarray(never), first_collision_t=jnp.asarray(first_c), first_offroad_t=jnp.asarray(never),
        collision_partner=jnp.asarray(partner),
    )


@pytest.fixture(scope="module")
def road():
    """The straight road with a cyclist in slot 2 (the hand records use slots 0 and 1)."""
    raw = straight_road([(40, -2, 0, 5), (60, -2, 0, 5), (100, 2, np.pi, 3)])
    raw.obj_type[2] = types.CYCLIST
    return build_scenario(raw, CFG)


KEEPING = (0.0, 0.0)  # (offset, lat_speed): on lane 0's centre
CHANGING = (1.2, 2.0)  # 1.2 m left of centre (box over the boundary), drifting 0.6 m in the last 4 rows
STRADDLING = (1.2, 0.0)  # over the boundary, not drifting
DRIFTING = (0.0, 1.3)  # drifting 0.39 m in the last 4 rows, but its box inside the lane
CASES = {
    # name: (ego_speed, (offset, lat_speed), partner rel xy, partner_speed, partner_rel_yaw, changing, at fault)
    "both stopped, front": (0.0, KEEPING, (5.0, 0.0), 0.0, 0.0, False, False),  # rule 1 before rule 2
    "stopped partner beside": (5.0, KEEPING, (0.0, 2.2), 0.0, 0.0, False, True),  # rule 2 before rule 6
    "rear-ended in lane": (5.0, KEEPING, (-4.6, 0.0), 8.0, 0.0, False, False),  # rule 4
    "rear-ended while changing": (5.0, CHANGING, (-4.6, 0.0), 8.0, 0.0, True, True),  # rule 4 exception
    "front, closing": (5.0, KEEPING, (4.6, 0.0), 1.0, 0.0, False, True),  # rule 5
    "front, not closing": (5.0, KEEPING, (4.6, 0.0), 5.0, 0.0, False, False),  # rule 5 needs > 0.5 m/s
    "front, not closing, changing": (5.0, CHANGING, (4.6, 0.0), 5.0, 0.0, True, True),  # then rule 6
    "lateral in lane": (5.0, KEEPING, (0.5, 2.1), 5.0, -0.3, False, False),  # rule 6
    "lateral while changing": (5.0, CHANGING, (0.5, 2.1), 5.0, 0.0, True, True),  # rule 6
    "lateral, straddling only": (5.0, STRADDLING, (0.5, 2.1), 5.0, -0.3, False, False),  # needs the drift too
    "lateral, drifting only": (10.0, DRIFTING, (0.5, 2.1), 10.0, -0.3, False, False),  # needs the straddle too
}


@pytest.mark.parametrize("name", list(CASES))
def test_rule_priority_on_hand_records(road, name):
    ego_speed, (offset, lat_speed), rel, p_speed, p_yaw, changing, expected = CASES[name]
    rec = hand_record(ego_speed, offset, lat_speed, rel, p_speed, p_yaw)
    fault, f, m = evaluate(road, rec, 0)
    if (offset, lat_speed) == STRADDLING:
        assert f["straddling"] and f["drift"] < 0.01
    if (offset, lat_speed) == DRIFTING:
        assert not f["straddling"] and f["drift"] > bm.DRIFT
    assert (f["straddling"] and f["drift"] > bm.DRIFT) == changing
    assert fault == expected
    assert m["at_fault"] == float(expected) and m["non_at_fault"] == float(not expected)


def test_cyclist_partner_halting_ego_and_no_collision(road):
    # A cyclist (slot 2) rear-ending a lane-keeping ego: the VRU rule comes before the rear-end rule.
    rec = hand_record(5.0, *KEEPING, (-4.6, 0.0), 8.0)
    swap = lambda x: x.at[:, 2].set(x[:, 1])  # noqa: E731
    rec = rec.replace(
        xy=swap(rec.xy), yaw=swap(rec.yaw), speed=swap(rec.speed), alive=swap(rec.alive),
        collision_partner=rec.collision_partner.at[0].set(2),
    )
    assert evaluate(road, rec, 0)[0]
    assert not evaluate(road, rec.replace(collision_partner=rec.collision_partner.at[0].set(1)), 0)[0]
    # An ego braking to a halt in the very step it hits a stopped car ahead is not a stopped ego.
    rec = hand_record(0.3, *KEEPING, (4.6, 0.0), 0.0)
    halted = rec.replace(speed=rec.speed.at[ROW, 0].set(0.0))
    assert evaluate(road, halted, 0)[0]
    assert not evaluate(road, halted.replace(speed=halted.speed.at[ROW - 1, 0].set(0.0)), 0)[0]  # stood still
    # Never collided: never at fault, even for an ego changing lanes to the end of the record.
    fault, _, m = evaluate(road, hand_record(5.0, *CHANGING, (4.6, 0.0), 1.0, collided=False), 0)
    assert not fault and m["collision"] == m["at_fault"] == m["non_at_fault"] == 0.0 and m["timeout"] == 1.0


def test_outcome_is_the_first_event(road):
    # An at-fault collision after an off-road (keep-driving mode): the outcome is off-road, so neither
    # at_fault nor non_at_fault counts it, though the collision itself is classified at fault.
    rec = hand_record(5.0, *KEEPING, (4.6, 0.0), 1.0)
    fault, _, m = evaluate(road, rec.replace(first_offroad_t=rec.first_offroad_t.at[0].set(ROW - 2)), 0)
    assert fault and m["offroad"] == 1.0 and m["collision"] == m["at_fault"] == m["non_at_fault"] == 0.0
    # Goal and collision in the same step: a collision, and not clean.
    _, _, m = evaluate(road, rec.replace(goal_t=rec.goal_t.at[0].set(ROW)), 0)
    assert m["collision"] == 1.0 and m["goal"] == m["clean"] == m["score"] == 0.0
    # The goal first (clean), then nothing: score = 100 x the mean sub-score.
    _, _, m = evaluate(road, rec.replace(goal_t=rec.goal_t.at[0].set(ROW), first_collision_t=rec.goal_t), 0)
    assert m["goal"] == m["clean"] == 1.0
    mean_sub = (m["comfort"] + m["lane_align"] + m["lane_center"]) / 3
    assert m["score"] == pytest.approx(100.0 * mean_sub, abs=1e-4)


def test_comfort_counts_driven_steps_only(road):
    # Ego alive in rows 0..9, removed in row 10: driven steps 1..10. Jerk-only violations (|accel|
    # <= 3) in steps 5, 6 (accel 0 -> 2 -> 0) and 10 (0 -> -0.6, the removing step); after removal a
    # wild value in row 15 must not count. 3 of 10 steps: comfort 0.7.
    rec = hand_record(5.0, *KEEPING, (4.6, 0.0), 1.0)
    accel = rec.accel.at[5, 0].set(2.0).at[10, 0].set(-0.6).at[15, 0].set(9.0)
    _, _, m = evaluate(road, rec.replace(accel=accel), 0)
    assert m["comfort"] == pytest.approx(0.7, abs=1e-6)
    lat = rec.lat_accel.at[3, 0].set(3.5).at[4, 0].set(3.5).at[5, 0].set(3.5)  # |lat| > 3 in steps 3-5
    _, _, m = evaluate(road, rec.replace(lat_accel=lat), 0)
    assert m["comfort"] == pytest.approx(0.6, abs=1e-6)  # steps 3, 4, 5, and the jerk back to 0 in step 6
