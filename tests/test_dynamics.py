import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.sim import dynamics, types


def test_straight_acceleration_hand_computed():
    # v1 = 10 + 2 * 0.1 = 10.2; distance = mean speed * dt = 1.01 m along +x.
    xy, yaw, v = dynamics.bicycle_step(
        jnp.zeros((1, 2)),
        jnp.zeros(1),
        jnp.array([10.0]),
        jnp.array([2.0]),
        jnp.zeros(1),
        jnp.array([4.5]),
        0.6,
        40.0,
        5.0,
        0.1,
    )
    np.testing.assert_allclose(np.asarray(v), [10.2], atol=1e-6)
    np.testing.assert_allclose(np.asarray(xy), [[1.01, 0.0]], atol=1e-6)
    np.testing.assert_allclose(np.asarray(yaw), [0.0], atol=1e-7)


def test_turn_hand_computed():
    # delta = 0.3 rad, L = 0.6 * 5 = 3 m, v = 10 const.
    d, length, v, dt = 0.3, 5.0, 10.0, 0.1
    beta = np.arctan(0.5 * np.tan(d))
    yaw_rate = v * np.cos(beta) * np.tan(d) / (0.6 * length)
    xy, yaw, v1 = dynamics.bicycle_step(
        jnp.array([[1.0, 2.0]]),
        jnp.array([0.5]),
        jnp.array([v]),
        jnp.zeros(1),
        jnp.array([d]),
        jnp.array([length]),
        0.6,
        40.0,
        5.0,
        dt,
    )
    np.testing.assert_allclose(np.asarray(yaw), [0.5 + yaw_rate * dt], atol=1e-6)
    expect = np.array([1.0, 2.0]) + v * dt * np.array([np.cos(0.5 + beta), np.sin(0.5 + beta)])
    np.testing.assert_allclose(np.asarray(xy)[0], expect, atol=1e-5)
    np.testing.assert_allclose(np.asarray(v1), [v], atol=1e-6)


def test_speed_limits_clip():
    _, _, v = dynamics.bicycle_step(
        jnp.zeros((2, 2)),
        jnp.zeros(2),
        jnp.array([39.9, -4.9]),
        jnp.array([4.0, -4.0]),
        jnp.zeros(2),
        jnp.array([4.5, 4.5]),
        0.6,
        40.0,
        5.0,
        0.1,
    )
    np.testing.assert_allclose(np.asarray(v), [40.0, -5.0], atol=1e-6)


def test_discrete_grid_roundtrip():
    params = types.default_params()
    assert params.accel_grid.shape == (7,) and params.steer_grid.shape == (13,)
    idx = jnp.arange(91)
    a, s = dynamics.decode_discrete(idx, params.accel_grid, params.steer_grid)
    np.testing.assert_array_equal(
        np.asarray(dynamics.encode_discrete(a, s, params.accel_grid, params.steer_grid)), np.arange(91)
    )
    # index 45 is (accel 0, steer 0): the "keep going" action.
    a45, s45 = dynamics.decode_discrete(jnp.array(45), params.accel_grid, params.steer_grid)
    assert float(a45) == 0.0 and float(s45) == 0.0


def test_lowest_acceleration_is_the_emergency_brake():
    """The grid is linspace(-4, 4, 7) but for its lowest value, -max_brake (8 m/s^2 by default); max_brake=4
    is the plain grid; below 4 the grid would not increase and is refused."""
    plain = np.linspace(-4, 4, 7)
    np.testing.assert_allclose(types.default_params().accel_grid, [-8.0, *plain[1:]], atol=1e-6)
    np.testing.assert_allclose(types.default_params(max_brake=4).accel_grid, plain, atol=1e-6)
    with pytest.raises(ValueError, match="max_brake must be in"):
        types.default_params(max_brake=3.0)


@pytest.mark.parametrize("steer", [-0.8, -0.2, 0.0, 0.4, 0.9])
def test_inverse_is_exact_for_the_model(steer):
    length = jnp.array([4.5])
    xy, yaw, v = jnp.zeros((1, 2)), jnp.array([0.3]), jnp.array([7.0])
    _, yaw1, v1 = dynamics.bicycle_step(xy, yaw, v, jnp.array([1.5]), jnp.array([steer]), length, 0.6, 40.0, 5.0, 0.1)
    a, d = dynamics.inverse_bicycle(yaw, v, yaw1, v1, length, 0.6, 0.1)
    np.testing.assert_allclose(np.asarray(a), [1.5], atol=1e-4)
    np.testing.assert_allclose(np.asarray(d), [steer], atol=1e-4)


def test_inverse_reproduces_a_logged_trajectory():
    """Replaying actions inferred from a log (made by the bicycle with smooth random controls)
    stays within 0.05 m of it over 90 steps; snapping them to the 91-action grid stays within 3 m."""
    rng = np.random.default_rng(0)
    n, t = 4, 91
    accel = np.clip(np.cumsum(rng.normal(0, 0.3, (t - 1, n)), 0), -3, 3)
    steer = np.clip(np.cumsum(rng.normal(0, 0.02, (t - 1, n)), 0), -0.5, 0.5)
    length = jnp.full(n, 4.5)
    xy, yaw, v = jnp.zeros((n, 2)), jnp.zeros(n), jnp.full(n, 8.0)
    log = [(xy, yaw, v)]
    for k in range(t - 1):
        xy, yaw, v = dynamics.bicycle_step(
            xy, yaw, v, jnp.asarray(accel[k]), jnp.asarray(steer[k]), length, 0.6, 40.0, 5.0, 0.1
        )
        log.append((xy, yaw, v))
    log_xy = jnp.stack([p[0] for p in log], 1)
    log_yaw = jnp.stack([p[1] for p in log], 1)
    log_v = jnp.stack([p[2] for p in log], 1)
    log_vel = log_v[..., None] * jnp.stack([jnp.cos(log_yaw), jnp.sin(log_yaw)], -1)
    a, d, valid = dynamics.inverse_log(
        log_yaw, log_vel, jnp.ones((n, t), bool), jnp.tile(jnp.array([[4.5, 2.0]]), (n, 1)), 0.6, 0.1
    )
    assert bool(valid.all())
    params = types.default_params()

    def replay(a, d):
        xy, yaw, v = log_xy[:, 0], log_yaw[:, 0], log_v[:, 0]
        err = 0.0
        for k in range(t - 1):
            xy, yaw, v = dynamics.bicycle_step(xy, yaw, v, a[:, k], d[:, k], length, 0.6, 40.0, 5.0, 0.1)
            err = max(err, float(jnp.max(jnp.linalg.norm(xy - log_xy[:, k + 1], axis=-1))))
        return err

    assert replay(a, d) < 0.05

    # Discrete: closed-loop tracking (invert from the simulated state to the next logged pose,
    # snap to the grid) stays within 1.5 m of the log.
    xy, yaw, v = log_xy[:, 0], log_yaw[:, 0], log_v[:, 0]
    err = 0.0
    for k in range(t - 1):
        a_k, d_k = dynamics.inverse_bicycle(yaw, v, log_yaw[:, k + 1], log_v[:, k + 1], length, 0.6, 0.1)
        idx = dynamics.encode_discrete(a_k, d_k, params.accel_grid, params.steer_grid)
        a_k, d_k = dynamics.decode_discrete(idx, params.accel_grid, params.steer_grid)
        xy, yaw, v = dynamics.bicycle_step(xy, yaw, v, a_k, d_k, length, 0.6, 40.0, 5.0, 0.1)
        err = max(err, float(jnp.max(jnp.linalg.norm(xy - log_xy[:, k + 1], axis=-1))))
    print("discrete closed-loop max error", err)
    assert err < 1.5


def test_actuator_direct_limit_and_inverse_round_trip():
    rng = np.random.default_rng(0)
    a_cmd, u_cmd = jnp.asarray(rng.uniform(-4, 4, 50)), jnp.asarray(rng.uniform(-1, 1, 50))
    a0, u0 = jnp.asarray(rng.uniform(-4, 4, 50)), jnp.asarray(rng.uniform(-1, 1, 50))
    v, length = jnp.asarray(rng.uniform(0, 25, 50)), jnp.asarray(rng.uniform(3, 6, 50))
    # lag 1, no lateral limit: the command itself.
    a, u, delta = dynamics.actuate(a_cmd, u_cmd, a0, u0, v, length, 0.6, 1.0, jnp.inf, 1.0)
    np.testing.assert_allclose(a, a_cmd, atol=1e-5)
    np.testing.assert_allclose(delta, u_cmd, atol=1e-5)
    # Default-like actuator: inverse_actuate recovers the commands.
    a, u, delta = dynamics.actuate(a_cmd, u_cmd, a0, u0, v, length, 0.6, 0.3, 8.0, 1.0)
    np.testing.assert_allclose(a, a0 + 0.3 * (a_cmd - a0), rtol=1e-5)
    a_back, u_back = dynamics.inverse_actuate(a, delta, a0, u0, v, length, 0.6, 0.3, 8.0, 1.0)
    np.testing.assert_allclose(a_back, a_cmd, atol=1e-4)
    np.testing.assert_allclose(u_back, u_cmd, atol=1e-4)
    # Full lock at speed: lateral acceleration v^2 tan(delta) / L is the limit.
    full = dynamics.steer_scale(jnp.array([20.0]), jnp.array([4.5]), 0.6, 8.0, 1.0)
    assert float(400.0 * jnp.tan(full[0]) / 2.7) == pytest.approx(8.0, rel=1e-4)
    assert float(dynamics.steer_scale(jnp.array([1.0]), jnp.array([4.5]), 0.6, 8.0, 1.0)[0]) == 1.0
