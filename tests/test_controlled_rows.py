"""SimConfig.max_controlled: events and rewards for the listed rows only, same values for them."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.scenarios.builder import build_scenario
from cp_jax.sim import conditions, env, geometry, types
from tests.support import assert_same
from tests.worlds import small_config, straight_road

FULL = small_config()  # max_controlled None: every slot, all pairs (the reference)
ROWS = small_config(max_controlled=3)
PARAMS = types.default_params()
KEEP, RIGHT = 45, 3 * 13 + 4  # accel 0 and steer 0 / steer -1/3 rad (towards the south edge)


def _world():
    """Agent 0: parked (log) in the eastbound lane at x = 80; agent 1 runs into it from x = 60 at
    10 m/s; agent 2 steers off the road's south edge; agent 3 drives west undisturbed; agents 4
    and 5 are log cars overlapping each other from the start (a log-log pair)."""
    return straight_road(
        [(80, -2, 0, 0.0), (60, -2, 0, 10.0), (20, -2, 0, 8.0), (150, 2, np.pi, 8.0),
         (120, 2, np.pi, 5.0), (122, 2, np.pi, 5.0)],
        goals=[(80, -2), (190, -2), (190, -2), (10, 2), (20, 2), (22, 2)],
    )


def _policy(p, obs, s, key):
    return jnp.array([KEEP, KEEP, RIGHT, KEEP, KEEP, KEEP, KEEP, KEEP], jnp.int32)


@functools.partial(jax.jit, static_argnums=(2,))
def _run(scenario, state, cfg):
    return env.rollout(_policy, None, state, scenario, PARAMS, cfg, cfg.episode_steps, keep_states=True)


def _start(cfg, controller=None):
    sc = build_scenario(_world(), cfg)
    return sc, env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), cfg, controller)


def test_rows_give_the_same_rollout_for_controlled_agents():
    sc, s_full = _start(FULL)
    _, s_rows = _start(ROWS)
    ctrl = np.asarray(s_rows.controller)
    np.testing.assert_array_equal(ctrl, np.asarray(s_full.controller))
    np.testing.assert_array_equal(np.flatnonzero(ctrl != types.LOG), [1, 2, 3])
    np.testing.assert_array_equal(np.asarray(s_rows.ctrl_rows), [1, 2, 3])  # the log car 0 is not listed
    f_full, t_full = _run(sc, s_full, FULL)
    f_rows, t_rows = _run(sc, s_rows, ROWS)
    # The world behaves as intended: 1 hits the parked log car 0, 2 leaves the road, 3 drives on.
    assert int(f_full.first_collision_t[1]) < types.INF_T and int(f_full.collision_partner[1]) == 0
    assert int(f_full.first_offroad_t[2]) < types.INF_T
    assert int(f_full.first_collision_t[3]) == int(f_full.first_offroad_t[3]) == types.INF_T
    for name in ("xy", "yaw", "speed", "alive", "removed"):  # every agent, every step (two programs)
        assert_same(getattr(t_rows.state, name), getattr(t_full.state, name), err_msg=name)
    c = [1, 2, 3]
    for name in ("reward", "terminated", "truncated", "collided", "offroad", "at_goal", "active"):
        assert_same(np.asarray(getattr(t_rows.out, name))[:, c], np.asarray(getattr(t_full.out, name))[:, c],
                    err_msg=name)
    for name in ("goal_t", "first_collision_t", "first_offroad_t", "collision_partner"):
        np.testing.assert_array_equal(np.asarray(getattr(f_rows, name))[c], np.asarray(getattr(f_full, name))[c])
    # Unlisted (log) agents get no events and no reward: the parked car that was hit, the log pair.
    assert int(f_full.first_collision_t[0]) < types.INF_T and int(f_rows.first_collision_t[0]) == types.INF_T
    assert int(f_full.first_collision_t[4]) < types.INF_T and int(f_rows.first_collision_t[4]) == types.INF_T
    assert not np.asarray(t_rows.out.reward)[:, [0, 4, 5, 6, 7]].any()


def test_overlap_rows_are_rows_of_the_matrix():
    rng = np.random.default_rng(0)
    a = 64
    xy = jnp.asarray(rng.uniform(0, 20, (a, 2)), jnp.float32)  # dense: many overlapping pairs
    yaw = jnp.asarray(rng.uniform(-np.pi, np.pi, a), jnp.float32)
    size = jnp.asarray(rng.uniform([1.0, 0.5], [6.0, 2.5], (a, 2)), jnp.float32)
    rows = jnp.asarray(rng.permutation(a)[:24], jnp.int32)
    full = np.asarray(geometry.overlap_matrix(xy, yaw, size))
    part = np.asarray(geometry.overlap_rows(xy, yaw, size, rows))
    assert full.sum() > a  # the test means something
    np.testing.assert_array_equal(part, full[np.asarray(rows)])
    np.testing.assert_array_equal(part[:, rows], part[:, rows].T)  # listed pairs agree


def test_agents_beyond_max_controlled_replay_their_log():
    cfg = small_config(max_controlled=2)
    sc, s0 = _start(cfg)
    np.testing.assert_array_equal(np.asarray(s0.controller)[:4], [types.LOG, types.POLICY, types.POLICY, types.LOG])
    np.testing.assert_array_equal(np.asarray(s0.ctrl_rows), [1, 2])
    final, traj = _run(sc, s0, cfg)
    np.testing.assert_allclose(np.asarray(final.xy[3]), _world().log_xy[3, cfg.episode_steps], atol=1e-4)
    # The two kept agents still match the reference rollout (agent 3 never met them).
    _, s_full = _start(FULL)
    _, t_full = _run(sc, s_full, FULL)
    np.testing.assert_array_equal(np.asarray(traj.out.reward)[:, 1:3], np.asarray(t_full.out.reward)[:, 1:3])


def test_set_controllers_keeps_rows_in_sync():
    _, s0 = _start(ROWS)
    ctrl = jnp.array([types.LOG, types.LOG, types.IDM, types.POLICY, types.CONST_VEL, types.POLICY,
                      types.OTHER_POLICY, types.LOG])
    s1 = env.set_controllers(s0, ctrl, ROWS)
    np.testing.assert_array_equal(np.asarray(s1.ctrl_rows), [2, 3, 4])
    expected = np.asarray(ctrl).copy()
    expected[5:7] = types.LOG  # the fourth and fifth non-log agents
    np.testing.assert_array_equal(np.asarray(s1.controller), expected)
    # Fewer non-log agents than rows: log agents pad the list, in index order.
    s3 = env.set_controllers(s0, jnp.full((8,), types.LOG).at[6].set(types.IDM), ROWS)
    np.testing.assert_array_equal(np.asarray(s3.ctrl_rows), [6, 0, 1])
    # With max_controlled None nothing is forced and every slot is listed, non-log first.
    s2 = env.set_controllers(_start(FULL)[1], ctrl, FULL)
    np.testing.assert_array_equal(np.asarray(s2.controller), np.asarray(ctrl))
    np.testing.assert_array_equal(np.asarray(s2.ctrl_rows), [2, 3, 4, 5, 6, 0, 1, 7])


def test_replay_log_checks_every_pair_whatever_max_controlled():
    sc = build_scenario(_world(), ROWS)
    final, _ = jax.jit(env.replay_log, static_argnums=2)(sc, PARAMS, ROWS)
    assert int(final.first_collision_t[4]) < types.INF_T  # the overlapping log pair 4-5


@pytest.mark.parametrize("value", [0, 9, -1, True, 2.0])
def test_max_controlled_is_validated(value):
    with pytest.raises(ValueError, match="max_controlled"):
        small_config(max_controlled=value)


def test_max_controlled_equal_to_max_agents_is_the_reference():
    cfg = dataclasses.replace(FULL, max_controlled=FULL.max_agents)
    assert not cfg.rows_only and cfg.num_controlled == FULL.max_agents
