import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.scenarios.builder import SceneError, build_scenario
from cp_jax.sim import conditions, dynamics, env, geometry, types
from tests.worlds import small_config, straight_road

CFG = small_config()
PARAMS = types.default_params()
KEEP = 45  # discrete action (accel 0, steer 0)


def const_policy(action):
    return lambda p, obs, s, k: jnp.full((CFG.max_agents,), action, jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 5, 6))
def roll(policy, pp, state, scenario, params, cfg, n):
    return env.rollout(policy, pp, state, scenario, params, cfg, n, keep_states=True)


def _reset(raw, cond="normal", controller=None, cfg=CFG, key=0):
    sc = build_scenario(raw, cfg)
    c = conditions.style(cond) if isinstance(cond, str) else cond
    return sc, env.reset(sc, jax.random.PRNGKey(key), c, cfg, controller)


def test_goal_reached_and_removed():
    # Agent 0 drives at 10 m/s toward a goal 30 m ahead: reaches it within 2 m at ~t = 28-29.
    sc, s0 = _reset(straight_road([(10, -2, 0, 10)], goals=[(40, -2)]))
    fs, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    assert int(fs.goal_t[0]) == types.INF_T  # 20 steps * 1 m = 20 m: not yet
    sc, s0 = _reset(straight_road([(10, -2, 0, 10)], goals=[(30, -2)]))
    fs, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    # Within 2 m of x = 30 at x >= 28.0..: step t gives x = 10 + t, so t = 19 (x = 29 > 28).
    assert int(fs.goal_t[0]) == 19
    assert bool(fs.removed[0]) and not bool(fs.alive[0])
    term = np.asarray(tr.out.terminated[:, 0])
    assert term.sum() == 1 and term[18]  # index 18 is the step into t = 19
    np.testing.assert_allclose(float(tr.out.reward[18, 0]), 1.0, atol=0.01)  # the goal bonus
    assert float(np.abs(tr.out.reward[19:, 0]).sum()) == 0.0  # nothing after removal


def test_goal_needs_low_enough_speed():
    # cautious goal_speed = 5 m/s: at 10 m/s the goal does not count.
    sc, s0 = _reset(straight_road([(10, -2, 0, 10)], goals=[(30, -2)]), cond="cautious")
    fs, _ = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    assert int(fs.goal_t[0]) == types.INF_T


def test_timeout_truncates():
    sc, s0 = _reset(straight_road([(10, -2, 0, 0.0)], goals=[(150, -2)]))
    fs, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    trunc = np.asarray(tr.out.truncated[:, 0])
    assert trunc[-1] and trunc.sum() == 1
    assert not np.asarray(tr.out.terminated[:, 0]).any()
    assert bool(fs.alive[0])


def test_collision_removes_both_and_records_partner():
    # Head-on in the same lane, closing at 20 m/s from 10 m apart (gap 5.5 m): collide at t = 3.
    sc, s0 = _reset(straight_road([(50, -2, 0, 10), (60, -2, np.pi, 10)], goals=[(150, -2), (0, -2)]))
    fs, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    np.testing.assert_array_equal(np.asarray(fs.first_collision_t[:2]), [3, 3])
    np.testing.assert_array_equal(np.asarray(fs.collision_partner[:2]), [1, 0])
    assert bool(fs.removed[0]) and bool(fs.removed[1])
    # Collision penalty: -(alpha_coll + 0.1 |v|) = -(3 + 1) for normal.
    assert float(tr.out.reward[2, 0]) == pytest.approx(-4.0, abs=0.02)


def test_keep_driving_mode():
    cfg = small_config(remove_on_event=False)
    sc, s0 = _reset(straight_road([(50, -2, 0, 10), (60, -2, np.pi, 10)], goals=[(150, -2), (0, -2)]), cfg=cfg)
    fs, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, cfg, 20)
    assert int(fs.first_collision_t[0]) == 3
    assert bool(fs.alive[0]) and not bool(fs.removed[0])
    assert not np.asarray(tr.out.terminated).any()


def test_log_replay_is_exact_and_log_agents_not_removed():
    raw = straight_road([(10, -2, 0, 10), (20, -3.9, 0, 5)])  # agent 1 drives along the edge (off-road)
    sc, s0 = _reset(raw, controller=jnp.full((CFG.max_agents,), types.LOG))
    fs, tr = roll(const_policy(0), None, s0, sc, PARAMS, CFG, 20)
    np.testing.assert_allclose(np.asarray(fs.xy[:2]), raw.log_xy[:, 20], atol=1e-4)
    assert bool(fs.alive[1]) and int(fs.first_offroad_t[1]) == 1  # flagged, but not removed


def test_constant_velocity_and_idm_follow_a_leader():
    # Agent 1 (IDM, 15 m/s desired) starts 30 m behind agent 0, which is parked in the lane.
    raw = straight_road(
        [(80, -2, 0, 0.0), (50, -2, 0, 10.0), (20, 2, np.pi, 10.0)], goals=[(80, -2), (190, -2), (-50, 2)], steps=21
    )
    ctrl = jnp.array([types.LOG, types.IDM, types.CONST_VEL] + [types.LOG] * 5)
    cfg = small_config(log_steps=21, episode_steps=20)
    sc, s0 = _reset(raw, controller=ctrl, cfg=cfg)
    # The parked car's goal equals its start: it is forced to log replay anyway.
    assert int(s0.controller[0]) == types.LOG
    fs, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, cfg, 20)
    np.testing.assert_allclose(np.asarray(fs.xy[2]), [0.0, 2.0], atol=1e-3)  # 20 m west at 10 m/s
    # IDM brakes behind the parked car: no collision, gap kept >= min gap.
    assert int(fs.first_collision_t[1]) == types.INF_T
    assert float(fs.xy[1, 0]) < 80 - 4.5 - 1.0
    assert float(fs.speed[1]) < 10.0


def test_idm_stops_at_red_light():
    raw = straight_road([(45, -2, 0, 8.0)], goals=[(190, -2)])
    # Split the eastbound lane in two at x = 60; the second half's entry shows STOP.
    east = raw.lanes[0]
    raw.lanes = [east[east[:, 0] <= 60], raw.lanes[1], east[east[:, 0] >= 60]]
    raw.lane_succ, raw.lane_left, raw.lane_right = [[2], [], []], [-1] * 3, [-1] * 3
    raw.routes = [[0, 2]]
    raw.tl_state = np.zeros((3, 21), np.int32)
    raw.tl_state[2] = types.TL_STOP
    ctrl = jnp.full((CFG.max_agents,), types.IDM)
    sc, s0 = _reset(raw, controller=ctrl)
    fs, _ = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    assert 50.0 < float(fs.xy[0, 0]) < 60.0 - 2.25
    raw.tl_state[2] = types.TL_GO
    sc, s0 = _reset(raw, controller=ctrl)
    fs, _ = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    assert float(fs.xy[0, 0]) > 60.0


def random_policy(p, obs, s, key):
    """Random actions, but slower for agents whose condition asks for a low goal speed."""
    act = jax.random.randint(key, (CFG.max_agents,), 0, 91)
    slow = s.cond[:, 9] < 10.0
    return jnp.where(slow, 3 * 13 + act % 13 - 26, act)  # low-accel rows for slow agents


def _world():
    return straight_road(
        [(10, -2, 0, 8), (40, -2, 0, 6), (150, 2, np.pi, 8), (100, 2, np.pi, 5)],
        goals=[(60, -2), (120, -2), (60, 2), (20, 2)],
        length=200,
        steps=21,
    )


def test_determinism_same_seed_same_outputs():
    sc, s0 = _reset(_world())
    a = roll(random_policy, None, s0, sc, PARAMS, CFG, 20)
    b = roll(random_policy, None, s0, sc, PARAMS, CFG, 20)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_snapshots_are_states():
    """Run 10 steps, keep the state, continue to the end twice with the same key (identical), once
    with another key (different), once with another condition for one agent (only it differs)."""
    sc, s0 = _reset(_world())
    snap, _ = roll(random_policy, None, s0, sc, PARAMS, CFG, 10)
    rest = lambda s: roll(random_policy, None, s, sc, PARAMS, CFG, 10)  # noqa: E731
    (f1, t1), (f2, t2) = rest(snap), rest(snap)
    for x, y in zip(jax.tree.leaves((f1, t1)), jax.tree.leaves((f2, t2)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # The uninterrupted 20-step rollout equals 10 + 10 from the snapshot.
    full, _ = roll(random_policy, None, s0, sc, PARAMS, CFG, 20)
    np.testing.assert_array_equal(np.asarray(full.xy), np.asarray(f1.xy))

    f3, _ = rest(snap.replace(key=jax.random.PRNGKey(123)))
    assert not np.allclose(np.asarray(f3.xy[:4]), np.asarray(f1.xy[:4]))

    # Agent 3 (far from the others) gets the cautious condition: only its path and rewards change.
    f4, t4 = rest(snap.replace(cond=snap.cond.at[3].set(conditions.style("cautious"))))
    changed = np.any(np.abs(np.asarray(f4.xy) - np.asarray(f1.xy)) > 1e-6, axis=-1)
    np.testing.assert_array_equal(changed[:4], [False, False, False, True])
    r_changed = np.any(np.asarray(t4.out.reward) != np.asarray(t1.out.reward), axis=0)
    np.testing.assert_array_equal(r_changed[:4], [False, False, False, True])


def test_auto_reset_is_branch_free_and_picks_a_bank_scene():
    scenes = [build_scenario(_world(), CFG), build_scenario(straight_road([(5, -2, 0, 3)]), CFG)]
    bank = env.stack_scenarios(scenes)
    cond_fn = lambda k: conditions.sample(k, (CFG.max_agents,))  # noqa: E731
    s0 = env.reset(scenes[0], jax.random.PRNGKey(0), conditions.style("normal"), CFG)
    s0 = s0.replace(t=jnp.asarray(7))
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), s0)
    f = jax.vmap(lambda s, i, d: env.auto_reset(s, i, d, bank, cond_fn, CFG))
    out, idx = f(batch, jnp.array([0, 0]), jnp.array([False, True]))
    assert int(out.t[0]) == 7 and int(idx[0]) == 0  # not done: untouched (except its key)
    assert int(out.t[1]) == 0  # done: fresh episode
    fresh = env.reset(scenes[int(idx[1])], out.key[1], out.cond[1], CFG)
    np.testing.assert_array_equal(np.asarray(out.xy[1]), np.asarray(fresh.xy))
    assert float(out.cond[1, 0, 9]) != float(s0.cond[0, 9])  # a sampled condition


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="max_agents"):
        types.SimConfig(max_agents=0)
    with pytest.raises(ValueError, match="dt"):
        types.SimConfig(dt=-0.1)
    with pytest.raises(ValueError, match="obs_road"):
        types.SimConfig(max_road_segments=64, obs_road=128, cell_edges=8, cell_lanes=8)
    with pytest.raises(ValueError, match="grid_size"):
        types.SimConfig(grid_size=1.5)


def test_scene_larger_than_static_sizes_names_the_field():
    raw = straight_road([(10 + 8 * i, -2, 0, 5) for i in range(9)])
    with pytest.raises(SceneError, match="objects.*max_agents"):
        build_scenario(raw, CFG)
    with pytest.raises(SceneError, match="roads.*max_road_segments"):
        build_scenario(
            straight_road([(10, -2, 0, 5)]),
            small_config(max_road_segments=40, obs_road=16, cell_edges=16, cell_lanes=8),
        )
    bad = straight_road([(10, -2, 0, 5)])
    bad.log_xy[0, 3, 0] = np.nan
    with pytest.raises(SceneError, match="'straight'.*log_xy"):
        build_scenario(bad, CFG)


def test_continuous_actions():
    cfg = small_config(discrete_actions=False)
    sc, s0 = _reset(straight_road([(10, -2, 0, 5.0)], goals=[(190, -2)]), cfg=cfg)
    policy = lambda p, obs, s, k: jnp.tile(jnp.array([[2.0, 0.0]]), (cfg.max_agents, 1))  # noqa: E731
    direct = types.default_params(actuator_lag=1.0, max_lat_accel=float("inf"))  # the command, unfiltered
    fs, _ = roll(policy, None, s0, sc, direct, cfg, 10)
    np.testing.assert_allclose(float(fs.speed[0]), 5.0 + 2.0 * 1.0, atol=1e-4)
    np.testing.assert_allclose(float(fs.xy[0, 0]), 10 + 5.0 * 1.0 + 0.5 * 2.0 * 1.0, atol=1e-3)


def _idm_world(yaw: float):
    """An IDM car on a straight road rotated by yaw, its route ending 40 m ahead."""
    raw = straight_road([(20, -2, 0, 12.0)], goals=[(60, -2)], length=200)
    c, s = np.cos(yaw), np.sin(yaw)
    rot = lambda p: p @ np.array([[c, s], [-s, c]])  # noqa: E731
    raw.lanes = [rot(p) for p in raw.lanes]
    raw.edges = [rot(p) for p in raw.edges]
    raw.others = [(k, rot(p)) for k, p in raw.others]
    raw.log_xy, raw.goal = rot(raw.log_xy), rot(raw.goal)
    raw.log_vel = rot(raw.log_vel)
    raw.log_yaw = raw.log_yaw + yaw
    return raw


def test_idm_brakes_smoothly_to_the_route_end_whatever_the_heading():
    speeds = []
    for yaw in (0.0, np.pi / 2, np.pi, -2.0):
        sc, s0 = _reset(_idm_world(yaw), controller=jnp.full((CFG.max_agents,), types.IDM))
        _, tr = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
        v = np.asarray(tr.state.speed[:, 0])
        speeds.append(v)
        assert np.min(np.diff(v)) / 0.1 > -8.01  # never more than the IDM clip, no instant stop
    for v in speeds[1:]:
        np.testing.assert_allclose(v, speeds[0], atol=1e-3)  # the world's heading does not matter


def test_idm_without_route_replays_its_log():
    """(The builder gives every moving controllable object a route, from its lanes or its logged path:
    tests/test_readers.py; a parked one has none.)"""
    raw = straight_road([(20, -2, 0, 5.0)], goals=[(150, -2)])
    sc = build_scenario(raw, CFG)
    sc = sc.replace(route_len=jnp.zeros_like(sc.route_len))
    s0 = env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), CFG, jnp.full((CFG.max_agents,), types.IDM))
    fs, _ = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 20)
    np.testing.assert_allclose(np.asarray(fs.xy[0]), raw.log_xy[0, 20], atol=1e-4)


def test_no_road_edges_means_nothing_to_leave():
    raw = straight_road([(20, -2, 0, 5.0)], goals=[(150, -2)])
    raw.edges = []
    sc, s0 = _reset(raw)
    fs, _ = roll(const_policy(KEEP), None, s0, sc, PARAMS, CFG, 5)
    assert int(fs.first_offroad_t[0]) == types.INF_T


def test_actions_are_clipped_to_the_grid():
    cfg = small_config(discrete_actions=False)
    sc, s0 = _reset(straight_road([(10, -2, 0, 5.0)], goals=[(190, -2)]), cfg=cfg)
    big = lambda p, obs, s, k: jnp.tile(jnp.array([[100.0, 1.6]]), (cfg.max_agents, 1))  # noqa: E731
    ok = lambda p, obs, s, k: jnp.tile(jnp.array([[4.0, 1.0]]), (cfg.max_agents, 1))  # noqa: E731
    f1, _ = roll(big, None, s0, sc, PARAMS, cfg, 3)
    f2, _ = roll(ok, None, s0, sc, PARAMS, cfg, 3)
    np.testing.assert_allclose(np.asarray(f1.xy[0]), np.asarray(f2.xy[0]), atol=1e-5)
    sc, s0 = _reset(straight_road([(10, -2, 0, 5.0)], goals=[(190, -2)]))
    f3, _ = roll(const_policy(1000), None, s0, sc, PARAMS, CFG, 3)
    f4, _ = roll(const_policy(90), None, s0, sc, PARAMS, CFG, 3)
    np.testing.assert_allclose(np.asarray(f3.xy[0]), np.asarray(f4.xy[0]), atol=1e-5)


def test_lane_frame_prefers_lanes_going_the_agents_way():
    from cp_jax.sim import geometry

    sc = build_scenario(straight_road([(50, -2, 0, 0)]), CFG)
    # 0.8 m from the eastbound lane, 3.2 m from the westbound one, heading west.
    err, lat, dist, found = geometry.lane_frame(jnp.array([[60.0, -1.2]]), jnp.array([np.pi]), sc, CFG)
    np.testing.assert_allclose(float(dist[0]), 3.2, atol=1e-4)
    assert abs(float(err[0])) < 1e-4


@pytest.mark.parametrize(
    "field, mutate",
    [
        ("sdc", lambda r: setattr(r, "sdc", 7)),
        ("obj_type", lambda r: setattr(r, "obj_type", np.full(r.num_objects, 9))),
        ("routes", lambda r: setattr(r, "routes", r.routes + [[0]])),
        ("tl_state", lambda r: setattr(r, "tl_state", np.full((2, 21), 7))),
        ("tl_state", lambda r: setattr(r, "tl_state", np.zeros((2, 5), int))),
        ("size", lambda r: setattr(r, "size", np.ones(r.num_objects))),
        ("lane_left", lambda r: setattr(r, "lane_left", [5, -1])),
        ("lanes\\[0\\]", lambda r: r.lanes.__setitem__(0, np.zeros((1, 2)))),
    ],
)
def test_builder_rejects_bad_fields_by_name(field, mutate):
    raw = straight_road([(10, -2, 0, 5.0), (30, -2, 0, 5.0)])
    mutate(raw)
    with pytest.raises(SceneError, match=field):
        build_scenario(raw, CFG)


def test_rollout_rows_matches_rollout_and_keeps_unlisted_agents_going():
    raws = [_world(), straight_road([(10, -2, 0, 6), (120, 2, np.pi, 4)], goals=[(150, -2), (20, 2)])]
    scenes = [build_scenario(r, CFG) for r in raws]
    bank = env.stack_scenarios(scenes)
    states = jax.vmap(lambda sc, k: env.reset(sc, k, conditions.style("normal"), CFG))(
        bank, jax.random.split(jax.random.PRNGKey(0), 2)
    )
    policy = lambda p, obs, s, k: (jnp.round(obs.ego[:, 2] * 1000).astype(jnp.int32) % 91)  # noqa: E731
    scene, agent = jnp.array([0, 0, 0, 1]), jnp.array([0, 1, 3, 0])  # agent 2 of scene 0, 1 of scene 1 unlisted
    run = jax.jit(lambda st, bk: env.rollout_rows(policy, None, st, bk, scene, agent, PARAMS, CFG, 10))
    final, (rows, _) = run(states, bank)
    # The same actions through the single-scene API give the same states.
    for b in range(2):
        s = jax.tree.map(lambda x, b=b: x[b], states)
        for t in range(10):
            act = jnp.full((CFG.max_agents,), KEEP, jnp.int32)
            listed = np.flatnonzero(np.asarray(scene) == b)
            act = act.at[agent[listed]].set(rows[t, listed])
            s, _ = env.step(s, act, scenes[b], PARAMS, CFG)
        np.testing.assert_allclose(np.asarray(s.xy), np.asarray(final.xy[b]), atol=1e-5)
    # Unlisted policy agents kept their speed (zero acceleration).
    np.testing.assert_allclose(float(final.speed[0, 2]), 8.0, atol=1e-4)


def test_actuator_lags_the_command_and_small_changes_are_not_jerks():
    """Default actuator: a one-grid-step change of command is a jerk of 4 m/s^3 (under the comfort
    threshold of 5), a jump of three steps is not; the steering at 15 m/s is scaled so that holding
    full lock settles at the 8 m/s^2 lateral limit, not the ~45 m/s^2 an unscaled 1 rad gives."""
    sc, s0 = _reset(straight_road([(20, -2, 0, 15.0)], goals=[(400, -2)], length=500))
    one_up = jnp.full((CFG.max_agents,), 4 * 13 + 6, jnp.int32)  # accel +1.33, steer 0
    s1, _ = env.step(s0, one_up, sc, PARAMS, CFG)
    assert float(s1.accel[0]) == pytest.approx(0.3 * 4.0 / 3.0, rel=1e-5)
    assert abs(float(s1.accel[0] - s0.accel[0])) / 0.1 <= 5.0
    three_up = jnp.full((CFG.max_agents,), 6 * 13 + 6, jnp.int32)  # accel +4 from 0
    s3, _ = env.step(s0, three_up, sc, PARAMS, CFG)
    assert abs(float(s3.accel[0] - s0.accel[0])) / 0.1 > 5.0
    # Full left lock held: lateral acceleration rises smoothly and settles near the limit.
    lock = const_policy(3 * 13 + 12)  # accel 0, steer +1
    _, tr = roll(lock, None, s0, sc, PARAMS, CFG, 12)
    lat = np.asarray(tr.state.lat_accel[:, 0])
    assert bool(tr.state.alive[-1, 0]) and 7.0 < lat[-1] < 8.5  # (it leaves the road soon after)
    assert np.max(np.abs(np.diff(lat))) / 0.1 < 40.0  # vs a 45 m/s^2 step with the direct bicycle
    direct = types.default_params(actuator_lag=1.0, max_lat_accel=float("inf"))
    _, tr_d = roll(lock, None, s0, sc, direct, CFG, 2)
    assert float(tr_d.state.lat_accel[1, 0]) > 30.0  # (trajectory states are pre-step)


def test_braking_stops_and_holds_without_a_reverse_gear():
    """max_reverse 0: full braking held from 3 m/s stops the car and keeps it at rest, and the
    actuator's state is what the car did (0 at rest, so it can pull away at once). With the default
    reverse gear (max_reverse 5) the same commands roll it backwards."""
    sc, s0 = _reset(straight_road([(20, -2, 0, 3.0)], goals=[(400, -2)], length=500, steps=91))
    brake = const_policy(0 * 13 + 6)  # the lowest accel (the emergency brake, -8), steer 0
    no_reverse = types.default_params(max_reverse=0.0)
    _, tr = roll(brake, None, s0, sc, no_reverse, CFG, 30)
    v, acc = np.asarray(tr.state.speed[:, 0]), np.asarray(tr.state.accel[:, 0])
    assert v.min() == 0.0 and v[-1] == 0.0 and bool(tr.state.alive[-1, 0])
    assert acc[-1] == 0.0 and np.all(acc >= -8.0)
    go = jnp.full((CFG.max_agents,), 4 * 13 + 6, jnp.int32)  # accel +1.33 from rest
    s_go, _ = env.step(jax.tree.map(lambda x: x[-1], tr.state), go, sc, no_reverse, CFG)
    assert float(s_go.speed[0]) == pytest.approx(0.1 * 0.3 * 4.0 / 3.0, rel=1e-4)
    _, tr_r = roll(brake, None, s0, sc, PARAMS, CFG, 30)
    assert float(tr_r.state.speed[-1, 0]) < -1.0


@pytest.mark.parametrize("kwargs, field", [
    (dict(actuator_lag=0.0), "actuator_lag"),  # the actuator would never move: no control at all
    (dict(actuator_lag=1.5), "actuator_lag"),
    (dict(max_lat_accel=0.0), "max_lat_accel"),  # steering scaled to nothing
    (dict(max_lat_accel=-2.0), "max_lat_accel"),  # ... or reversed
    (dict(max_lat_accel=float("nan")), "max_lat_accel"),
    (dict(num_accel=6), "num_accel"),  # even grids have no 0: the keep-driving index would accelerate
    (dict(num_steer=12), "num_steer"),
    (dict(num_accel=1), "num_accel"),  # linspace(-4, 4, 1) = [-4]
    (dict(max_reverse=-1.0), "max_reverse"),
    (dict(headway=-1.0), "idm.headway"),
    (dict(max_speeed=3.0), "unknown field"),
])
def test_sim_params_refuse_values_that_disable_control(kwargs, field):
    """Issue #33: default_params names the bad value (and what it allows) instead of building it."""
    with pytest.raises(ValueError, match=field):
        types.default_params(**kwargs)


def test_validate_params_checks_a_sim_params_put_together_by_hand():
    """Outside jit; the defaults and the direct bicycle pass, and the keep-driving action KEEP is (0, 0)."""
    assert types.validate_params(PARAMS) is PARAMS
    assert types.validate_params(types.default_params(actuator_lag=1.0, max_lat_accel=float("inf"), max_reverse=0.0))
    accel, steer = dynamics.decode_discrete(jnp.asarray(KEEP), PARAMS.accel_grid, PARAMS.steer_grid)
    assert float(accel) == 0.0 and float(steer) == 0.0
    for bad, name in ((PARAMS.replace(actuator_lag=jnp.float32(0.0)), "actuator_lag"),
                      (PARAMS.replace(accel_grid=PARAMS.accel_grid[:6]), "accel_grid"),
                      (PARAMS.replace(steer_grid=-PARAMS.steer_grid), "steer_grid")):
        with pytest.raises(ValueError, match=name):
            types.validate_params(bad)


def test_perturbed_starts_stay_on_the_road_apart_and_within_their_bounds():
    """Start noise moves only policy agents, within the offset / heading / speed bounds; a move that
    would leave the road or touch another box is undone (a 3.5 m offset on an 8 m road undoes many)."""
    starts = [(10.0 + 12.0 * i, -2.0 if i % 2 else 2.0, 0.0 if i % 2 else np.pi, 5.0) for i in range(6)]
    raw = straight_road(starts, length=120.0)
    ctrl = jnp.array([types.POLICY] * 5 + [types.LOG] + [types.LOG] * (CFG.max_agents - 6))
    sc, s0 = _reset(raw, controller=ctrl)
    moved = []
    for seed in range(8):
        s = env.perturb_start(s0, sc, jax.random.PRNGKey(seed), 3.5, np.radians(5.0), 2.0, CFG)
        d = np.asarray(s.xy - s0.xy)
        assert np.allclose(d[5:], 0.0) and np.allclose(np.asarray(s.speed[5:]), np.asarray(s0.speed[5:]))
        lateral = np.abs(d[:, 0] * -np.sin(np.asarray(s0.yaw)) + d[:, 1] * np.cos(np.asarray(s0.yaw)))
        assert (lateral <= 3.5 + 1e-5).all() and np.allclose(np.hypot(*d.T), lateral, atol=1e-4)  # sideways only
        assert (np.abs(np.asarray(s.yaw - s0.yaw)) <= np.radians(5.0) + 1e-6).all()
        ratio = np.asarray(s.speed[:5] / s0.speed[:5])
        assert ((ratio >= 1.0 - 1e-6) & (ratio <= 2.0 + 1e-6)).all()
        alive = np.asarray(s.alive)
        assert not np.asarray(env.is_offroad(s.xy, s.yaw, sc, CFG))[alive].any()
        assert not np.asarray(geometry.overlap_matrix(s.xy, s.yaw, sc.size))[np.ix_(alive, alive)].any()
        moved.append(lateral[:5] > 1e-3)
    moved = np.array(moved)
    assert 0 < moved.mean() < 1  # some moves kept, some undone
    same = env.perturb_start(s0, sc, jax.random.PRNGKey(0), 0.0, 0.0, 1.0, CFG)
    assert all(bool(jnp.all(a == b)) for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(s0), strict=True))
