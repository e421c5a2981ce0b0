import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.scenarios.builder import build_scenario
from cp_jax.sim import conditions, env, reward, types
from tests.worlds import small_config, straight_road

DT = 0.1
STYLES = ["aggressive", "normal", "cautious", "cautious_normal", "normal_aggressive"]


def kin(**kw):
    base = dict(
        speed=10.0,
        accel=0.0,
        lat_accel=0.0,
        jerk_long=0.0,
        jerk_lat=0.0,
        heading_err=0.0,
        lateral=0.0,
        on_lane=True,
    )
    base.update(kw)
    return reward.Kinematics(**{k: jnp.asarray([v]) for k, v in base.items()})


def terms(style, k, collided=False, offroad=False, at_goal=False):
    c = conditions.style(style)[None]
    t = reward.reward_terms(c, k, jnp.array([collided]), jnp.array([offroad]), jnp.array([at_goal]), DT)
    return {name: float(v[0]) for name, v in t.items()}


@pytest.mark.parametrize("style", STYLES)
def test_event_terms_sign_and_size(style):
    s = conditions.STYLES[style]
    a_coll, a_bnd = s[1], s[2]
    t = terms(style, kin(speed=8.0), collided=True, offroad=True, at_goal=True)
    assert t["collision"] == pytest.approx(-(a_coll + 0.8), rel=1e-5)
    assert t["offroad"] == pytest.approx(-a_bnd, rel=1e-5)
    assert t["goal"] == 1.0
    t0 = terms(style, kin(speed=8.0))
    assert t0["collision"] == 0.0 and t0["offroad"] == 0.0 and t0["goal"] == 0.0


@pytest.mark.parametrize("style", STYLES)
def test_shaping_terms_sign_and_size(style):
    s = conditions.STYLES[style]
    comfort, l_align, vel_align, l_center, bias, rev = s[3], s[4], s[5], s[6], s[7], s[8]
    # Driving straight along the lane centre at 10 m/s.
    t = terms(style, kin(lateral=bias))
    assert t["velocity"] == pytest.approx(2.5e-3 * DT, rel=1e-5)
    assert t["comfort"] == 0.0
    assert t["lane_align"] == pytest.approx(l_align * DT * 0.0025, rel=1e-4)  # 1 - |th|/(pi/2) = 1
    # Centred on the biased line: -(0 - 0.05 / exp(-0.5)) = +0.05 e^0.5 (a bonus).
    assert t["lane_center"] == pytest.approx(l_center * DT * 0.05 * np.exp(0.5), rel=1e-4)
    assert t["time"] == pytest.approx(-2.5e-5 * DT)
    assert t["reverse"] == 0.0
    # Hard braking, hard lateral accel and jerk: three comfort violations.
    t = terms(style, kin(accel=-4.0, lat_accel=3.5, jerk_long=6.0))
    assert t["comfort"] == pytest.approx(-3 * comfort, abs=1e-7)
    # Wrong way (heading error pi): the alignment terms are negative.
    t = terms(style, kin(heading_err=np.pi))
    expected = l_align * DT * (-1.0 + vel_align * -10.0 + 0.0025 * (1 - 2))
    assert t["lane_align"] == pytest.approx(expected, rel=1e-4)
    assert t["velocity"] == 0.0
    # 1.5 m off the biased line, aligned: penalty |x| - 0.05 / exp(1).
    t = terms(style, kin(lateral=bias + 1.5))
    assert t["lane_center"] == pytest.approx(-l_center * DT * (1.5 - 0.05 / np.exp(1.0)), rel=1e-4)
    # Reversing.
    t = terms(style, kin(speed=-2.0))
    assert t["reverse"] == pytest.approx(-rev * DT, rel=1e-5)


def test_aggressive_is_punished_less_for_collisions_than_cautious():
    k = kin(speed=5.0)
    agg = terms("aggressive", k, collided=True)["collision"]
    cau = terms("cautious", k, collided=True)["collision"]
    assert cau < agg < 0


def test_fixed_reward():
    r = reward.fixed_reward(
        jnp.array([True, False, False]), jnp.array([False, True, False]), jnp.array([False, False, True])
    )
    np.testing.assert_allclose(np.asarray(r), [-0.5, -0.5, 1.0])


def test_conditions_sampling_and_scaling():
    c = conditions.sample(jax.random.PRNGKey(0), (1000,))
    assert bool(jnp.all(c >= conditions.COND_LOW)) and bool(jnp.all(c <= conditions.COND_HIGH))
    s = conditions.scale(c)
    assert float(s.min()) >= -1.0 and float(s.max()) <= 1.0
    assert float(s.min()) < -0.95 and float(s.max()) > 0.95
    np.testing.assert_allclose(
        conditions.STYLES["halfway"], 0.5 * (conditions.STYLES["normal"] + conditions.STYLES["aggressive"])
    )
    with pytest.raises(ValueError, match="unknown style"):
        conditions.style("reckless")


def test_observation_frame_partner_straight_ahead():
    """A partner 10 m ahead of the ego (in the ego's heading, whatever it is) appears at (+10, 0)."""
    cfg = small_config()
    yaw = 0.7
    ego = (60.0, -2.0)
    ahead = (ego[0] + 10 * np.cos(yaw), ego[1] + 10 * np.sin(yaw))
    raw = straight_road(
        [(*ego, yaw, 5.0), (*ahead, yaw + 0.3, 2.0), (150, 2, np.pi, 1.0)], goals=[(60, 38), (0, 0), (0, 2)]
    )
    sc = build_scenario(raw, cfg)
    s = env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), cfg)
    obs = env.observe(s, sc, cfg)
    p = np.asarray(obs.partners[0, 0])
    np.testing.assert_allclose(p[:2], [10 * 0.02, 0.0], atol=1e-5)
    np.testing.assert_allclose(p[4:6], [np.cos(0.3), np.sin(0.3)], atol=1e-5)
    np.testing.assert_allclose(p[6], 2.0 / 100, atol=1e-6)
    assert bool(obs.partner_mask[0, 0]) and not bool(obs.partner_mask[0, 1])  # agent 2 is 90 m away
    # Ego block: goal (0, 40) relative to (60, -2) rotated into the ego frame.
    g = np.array([0.0, 40.0])
    local = np.array([np.cos(-yaw) * g[0] - np.sin(-yaw) * g[1], np.sin(-yaw) * g[0] + np.cos(-yaw) * g[1]])
    np.testing.assert_allclose(np.asarray(obs.ego[0, :2]), local * 0.005, atol=1e-5)
    np.testing.assert_allclose(np.asarray(obs.ego[0, 2:5]), [0.05, 2.0 / 15, 4.5 / 30], atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(obs.cond[0]), np.asarray(conditions.scale(conditions.style("normal"))), atol=1e-6
    )
    # Road: masked entries are zero, valid ones are nearest-first within the cell's list.
    assert bool(obs.road_mask[0].any())
    assert float(np.abs(np.asarray(obs.road[0])[~np.asarray(obs.road_mask[0])]).sum()) == 0.0
    # Padding rows (invalid agents) are all zero.
    assert float(np.abs(np.asarray(obs.ego[5])).sum()) == 0.0 and not bool(obs.road_mask[5].any())
    flat = obs.flat()
    assert flat.shape == (cfg.max_agents, 9 + 10 + cfg.obs_partners * 9 + cfg.obs_road * 8)
    # Previous acceleration / 4 and steering (zero at reset) close the ego block.
    np.testing.assert_allclose(np.asarray(obs.ego[0, 7:]), [0.0, 0.0])


def test_observation_carries_previous_action():
    """The ego block ends with the actuator's acceleration / 4 and steering position (jerk is penalised)."""
    cfg = small_config()
    sc = build_scenario(straight_road([(20.0, -2.0, 0.0, 5.0)], goals=[(150.0, -2.0)]), cfg)
    s = env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), cfg)
    action = jnp.full((cfg.max_agents,), 5 * 13 + 7, jnp.int32)  # accel index 5 (+2.67), steer index 7
    s, _ = env.step(s, action, sc, types.default_params(), cfg)
    ego = np.asarray(env.observe(s, sc, cfg).ego[0])
    p = types.default_params()
    accel, steer = p.accel_grid[5], p.steer_grid[7]  # commands; the actuator moved 0.3 of the way
    lag = float(p.actuator_lag)
    np.testing.assert_allclose(ego[7:], [lag * float(accel) / 4.0, lag * float(steer)], rtol=1e-5)
