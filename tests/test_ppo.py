"""Self-play PPO: GAE, validation, masks, determinism, learning on a tiny world."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.bench import metrics as bench_metrics
from cp_jax.policy import networks
from cp_jax.rl import evaluate, ppo, shaping
from cp_jax.scenarios.bank import make_bank
from cp_jax.sim import conditions, controllers, env, types
from tests.worlds import straight_road

SIM = types.SimConfig(
    max_agents=4, max_road_segments=256, max_lanes=4, log_steps=21, episode_steps=20,
    obs_partners=3, obs_road=16, grid_size=8, max_route_points=64, idm_lookahead=16, enable_idm=False,
)
NET = dataclasses.replace(networks.small(), set_width=16, trunk=(64,))


def _bank():
    """Two straight-road scenes: 3 eastbound cars 10 m from their goals, and a lone car + a parked car."""
    a = straight_road([(10.0, -2.0, 0.0, 5.0), (30.0, -2.0, 0.0, 5.0), (50.0, -2.0, 0.0, 5.0)],
                      goals=[(20.0, -2.0), (40.0, -2.0), (60.0, -2.0)], name="three")
    b = straight_road([(20.0, -2.0, 0.0, 5.0), (60.0, 2.0, np.pi, 0.0)],
                      goals=[(30.0, -2.0), (60.0, 2.0)], name="lone")
    return make_bank([a, b], SIM)


def _cfg(**kw):
    values = dict(num_envs=4, rollout_steps=10, num_minibatches=2, update_epochs=2, lr=3e-3, total_updates=40,
                  sample_capacity=1.0)
    values.update(kw)
    return ppo.PPOConfig(**values)


def test_gae_terminated_cuts_and_truncation_bootstraps():
    gamma, lam = 0.9, 0.8
    reward = jnp.array([[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])  # [T=3, 2 agents]
    value = jnp.array([[0.5, 0.5], [0.4, 0.4], [0.3, 0.3]])
    term = jnp.array([[False, False], [False, True], [False, False]])
    no = jnp.zeros_like(term)
    last = jnp.array([10.0, 10.0])
    adv, ret = ppo.gae(reward, value, term, no, jnp.zeros_like(value), last, gamma, lam)
    # agent 0: no termination; plain recursion with bootstrap 10.
    d = [1.0 + gamma * 0.4 - 0.5, 0.0 + gamma * 0.3 - 0.4, 2.0 + gamma * 10.0 - 0.3]
    a2 = d[2]
    a1 = d[1] + gamma * lam * a2
    a0 = d[0] + gamma * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    # agent 1: terminated at t=1: no bootstrap there and nothing from t=2 flows back.
    b1 = 0.0 - 0.4
    b0 = (1.0 + gamma * 0.4 - 0.5) + gamma * lam * b1
    np.testing.assert_allclose(adv[:2, 1], [b0, b1], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + value, rtol=1e-6)
    # Truncated at t=0 (the env restarted): bootstrap from V(final obs) = 7, not from value[1].
    trunc = jnp.array([[True, False], [False, False], [False, False]])
    boot = jnp.array([[7.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    adv_t, _ = ppo.gae(reward, value, term, trunc, boot, last, gamma, lam)
    np.testing.assert_allclose(adv_t[0, 0], 1.0 + gamma * 7.0 - 0.5, rtol=1e-6)
    np.testing.assert_allclose(adv_t[1:, 0], adv[1:, 0], rtol=1e-6)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(sample_capacity=0.0), "sample_capacity"),
        (dict(num_minibatches=10_000), "num_minibatches"),
        (dict(rollouts_per_scene=0), "rollouts_per_scene"),
        (dict(lr_schedule="step"), "lr_schedule"),
        (dict(gamma=1.5), "gamma"),
        (dict(num_envs=0), "num_envs"),
        (dict(compact_groups=3), "compact_groups"),
        (dict(compact_groups=0), "compact_groups"),
        (dict(bank_groups=3), "bank_groups"),
    ],
)
def test_config_errors_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        _cfg(**kw).validate(SIM)


def test_grouped_bank_envs_draw_only_from_their_own_group():
    """bank_groups=2 over the scenes [a, b, b, a]: group 0 is [a, b], group 1 [b, a]; scene index i of
    an env in group g is scene g * 2 + i of the flat bank."""
    three = _bank()
    grouped = env.group_bank(jax.tree.map(lambda x: jnp.concatenate([x, x[::-1]]), three), 2)
    assert jax.tree.leaves(grouped)[0].shape[:2] == (2, 2)
    with pytest.raises(ValueError, match="bank_groups"):
        env.group_bank(three, 3)
    for bank, groups in ((three, 2), (grouped, 1), (grouped, 4)):  # a bank not grouped as the config says
        with pytest.raises(ValueError, match="bank_groups"):
            ppo.take_scenes(bank, jnp.zeros(4, jnp.int32), _cfg(num_envs=4, bank_groups=groups))
    cfg = _cfg(num_envs=4, bank_groups=2)
    idx = jnp.array([0, 1, 0, 1])  # envs 0, 1 in group 0; envs 2, 3 in group 1
    scenes = ppo.take_scenes(grouped, idx, cfg)
    flat = jax.tree.map(lambda x: x.reshape(4, *x.shape[2:]), grouped)
    for env_i, scene_i in enumerate([0, 1, 2, 3]):
        np.testing.assert_array_equal(np.asarray(scenes.log_xy[env_i]), np.asarray(flat.log_xy[scene_i]))


def test_compaction_keeps_valid_samples_first_within_each_group_of_envs():
    t, b, a = 3, 4, 2  # 6 slots per env
    env_id = jnp.broadcast_to(jnp.arange(b)[None, :, None], (t, b, a))
    valid = jnp.zeros((t, b, a)).at[:, 0].set(1.0).at[0, 1].set(1.0).at[:, 3].set(1.0)  # 6, 2, 0, 6 valid
    key = jax.random.PRNGKey(0)
    (ids, w), dropped = ppo.compact((env_id, valid), valid, key, capacity=8, groups=4)
    np.testing.assert_array_equal(ids, [0, 0, 1, 1, 2, 2, 3, 3])  # K / G = 2 per env, group-major
    np.testing.assert_array_equal(w, [1, 1, 1, 1, 0, 0, 1, 1])  # env 2 has no valid sample: fillers
    assert int(dropped) == 8  # envs 0 and 3 each keep 2 of 6
    (ids, w), dropped = ppo.compact((env_id, valid), valid, key, capacity=8, groups=1)
    assert w.sum() == 8 and int(dropped) == 14 - 8 and set(np.asarray(ids).tolist()) <= {0, 1, 3}
    (ids, w), dropped = ppo.compact((env_id, valid), valid, key, capacity=24, groups=2)
    np.testing.assert_array_equal(np.sort(np.asarray(ids[:12])), [0] * 6 + [1] * 6)  # every sample once
    np.testing.assert_array_equal(w[:12], [1] * 8 + [0] * 4)
    assert int(dropped) == 0


@pytest.fixture(scope="module")
def tiny():
    bank = _bank()
    net = networks.ActorCritic(NET)
    cfg = _cfg()
    update = ppo.make_update(net, cfg, SIM, types.default_params())
    return bank, net, cfg, update


def _run(tiny, n, seed=0):
    bank, net, cfg, update = tiny
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(seed), bank)
    history = []
    for _ in range(n):
        runner, stats = update(runner, bank)
        history.append(jax.device_get(stats))
    return runner, history


def test_update_metrics_finite_envs_restart_and_switch_scenes(tiny):
    runner, hist = _run(tiny, 4)
    for h in hist:
        for k, v in h.items():
            assert np.isfinite(v), k
    # Episodes end within the 4 rollouts of 10 steps (episode limit 20): the rates cover them.
    assert sum(h["episodes"] for h in hist) > 0
    for h in hist:
        if h["episodes"] > 0:
            rates = sum(h[f"{k}_rate"] for k in ("goal", "collision", "offroad", "timeout"))
            assert rates == pytest.approx(1.0, abs=1e-5)
    # After rollouts_per_scene = 4 updates every env drew a new scene and starts at frame 0.
    assert int(runner.update) == 4 and np.all(np.asarray(runner.env.t) == 0)
    # Only policy agents that were alive count as samples: the parked car never does.
    for h in hist:
        assert 0 < h["samples"] <= 4 * 10 * 3


def test_same_seed_same_metrics_other_seed_differs(tiny):
    r1, h1 = _run(tiny, 3, seed=1)
    r2, h2 = _run(tiny, 3, seed=1)
    r3, h3 = _run(tiny, 3, seed=2)
    assert h1 == h2
    jax.tree.map(np.testing.assert_array_equal, r1.params, r2.params)
    assert h1 != h3


def test_ppo_learns_to_reach_goals():
    """Goals 10 m ahead on the straight road: holding speed and lane reaches them, but the random
    initial policy (sampled actions) swerves off the 8 m road for 5 of 16 agents and reaches only
    9 goals (the actuator's lag smooths random steering; on the direct bicycle it was < 30%). 40
    updates of (non-conditioned) PPO must learn to keep straight: every goal, nobody off-road. The
    non-conditioned baseline drives under the fixed style and is paid the fixed reward (+1 / -0.5
    events only, no shaping: most steps pay exactly 0)."""
    bank = _bank()
    net = networks.ActorCritic(dataclasses.replace(NET, condition=False))
    cfg = _cfg(conditioned=False, num_envs=16, rollout_steps=20, num_minibatches=4, lr=1e-3, ent_coef=0.01,
               sample_capacity=1.0)
    update = ppo.make_update(net, cfg, SIM, types.default_params())
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(0), bank)
    normal = conditions.style("normal")
    many = jax.tree.map(lambda x: jnp.concatenate([x] * 4), bank)  # 4 copies: 16 agents, sampled actions
    rate = lambda r: float(r["goal"].sum() / r["controlled"].sum())  # noqa: E731
    before = evaluate.evaluate(net, runner.params, many, normal, types.default_params(), SIM, jax.random.PRNGKey(0),
                          greedy=False)
    np.testing.assert_allclose(runner.env.cond[0, 0], conditions.style("normal"))
    for i in range(40):
        runner, stats = update(runner, bank)
        if i == 0:
            assert abs(float(stats["reward_per_step"])) < 0.2
    after = evaluate.evaluate(net, runner.params, bank, normal, types.default_params(), SIM, jax.random.PRNGKey(0))
    assert rate(before) < 0.6 and int(before["offroad"].sum()) >= 3
    assert rate(after) >= 0.9 and int(after["offroad"].sum()) == 0, jax.device_get(stats)


def test_lstm_policy_trains_and_evaluates():
    bank = _bank()
    net = networks.ActorCritic(dataclasses.replace(NET, lstm=8))
    cfg = _cfg(rollouts_per_scene=2)
    update = ppo.make_update(net, cfg, SIM, types.default_params())
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(0), bank)
    assert runner.carry[0][0].shape == (4, SIM.max_agents, 8)
    for _ in range(2):
        runner, stats = update(runner, bank)
        assert np.isfinite(float(stats["policy_loss"]))
    # The memory restarts with the scenes (every rollouts_per_scene updates).
    assert not np.any(np.asarray(runner.carry[0][0]))
    r = evaluate.evaluate(net, runner.params, bank, conditions.style("normal"), types.default_params(), SIM,
                     jax.random.PRNGKey(0))
    assert int(r["controlled"].sum()) == 4


def test_evaluate_counts_at_fault_and_mixes_styles():
    """A car 0.5 m behind a stopped one at 10 m/s hits it in the first step whatever it does: both
    collide, the one behind is at fault. evaluate_mixed: every agent drives under each of the K
    conditions once, so with K equal conditions each one's rates are the plain evaluation's."""
    rear = straight_road([(10.0, -2.0, 0.0, 10.0), (15.0, -2.0, 0.0, 0.0)], goals=[(90.0, -2.0), (95.0, -2.0)])
    bank = make_bank([rear, rear], SIM)
    net = networks.ActorCritic(NET)
    net_params = ppo.init(net, _cfg(), SIM, jax.random.PRNGKey(0), bank).params
    normal = jnp.tile(conditions.style("normal"), (SIM.max_agents, 1))
    res = evaluate.evaluate(net, net_params, bank, normal, types.default_params(), SIM, jax.random.PRNGKey(1),
                            classify=bench_metrics.at_fault_in)
    np.testing.assert_array_equal(np.asarray(res["controlled"])[:, :2], True)
    np.testing.assert_array_equal(np.asarray(res["collision"])[:, :2], True)
    np.testing.assert_array_equal(np.asarray(res["classified"])[:, :2], [[True, False]] * 2)
    assert evaluate.summarise(res)["classified"] == 0.5 and "classified" not in evaluate.summarise(
        {k: v for k, v in res.items() if k != "classified"})
    mixed = evaluate.evaluate_mixed(net, net_params, bank, jnp.stack([conditions.style("normal")] * 2),
                                    types.default_params(), SIM, jax.random.PRNGKey(1),
                                    classify=bench_metrics.at_fault_in)
    assert mixed == [evaluate.summarise(res)] * 2


def test_style_frac_mixes_named_styles_into_sampled_conditions():
    styles = np.stack([conditions.STYLES[s] for s in conditions.RETRY_STYLES])
    cond = np.asarray(ppo.sample_conditions(jax.random.PRNGKey(1), (64, 8), _cfg(style_frac=0.5)))
    named = np.any(np.all(np.isclose(cond[..., None, :], styles), -1), -1)
    assert 0.35 < named.mean() < 0.65  # the rest are uniform samples, never exactly a style
    assert set(np.unique(cond[named][:, 0])) == {2.0}  # named styles use the evaluation radius
    everyone = np.asarray(ppo.sample_conditions(jax.random.PRNGKey(1), (16, 4), _cfg(style_frac=1.0)))
    assert np.all(np.any(np.all(np.isclose(everyone[..., None, :], styles), -1), -1))
    with pytest.raises(ValueError, match="style_frac"):
        _cfg(style_frac=1.5).validate(SIM)


def test_opponents_act_from_their_own_parameters_and_stay_out_of_the_loss():
    """PPO-Opponent: OTHER_POLICY agents take the opponent's actions and are never samples."""
    bank, net = _bank(), networks.ActorCritic(NET)
    cfg = _cfg(opponent_frac=0.5)
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(0), bank)
    p = runner.params["params"]
    hard_brake = 0 * 13 + 6  # accel -4, steer 0
    opp = {"params": dict(p, actor=dict(p["actor"], bias=p["actor"]["bias"].at[hard_brake].add(50.0)))}
    scenes = jax.vmap(env.take_scenario, in_axes=(None, 0))(bank, runner.scene_idx)
    *_, batch = jax.jit(ppo.make_rollout(net, cfg, SIM, types.default_params()))(runner, scenes, shaping.none(), opp)
    ctrl = np.asarray(runner.env.controller)  # [B, A] the first step's controllers
    other, mine = ctrl == types.OTHER_POLICY, ctrl == types.POLICY
    assert other.any() and mine.any()
    acting = np.asarray(batch.obs.ego[0].any(-1))
    assert np.all(np.asarray(batch.action[0])[other & acting] == hard_brake)
    assert not np.any(np.asarray(batch.valid[0])[other])  # never a sample while driven by the opponent
    assert np.asarray(batch.valid[0])[mine & acting].all()
    with pytest.raises(ValueError, match="opponent"):
        ppo.make_update(net, cfg, SIM, types.default_params())(runner, bank)


def _mixed_rollout(cfg, sim, controller):
    """One rollout of a mixed-traffic config -> (final state, Batch, scenes, [B, A] mask of the
    eligible agents that start under `controller` in envs that also have a POLICY agent (envs
    without one restart at once)."""
    bank, net = _bank(), networks.ActorCritic(NET)
    runner = ppo.init(net, cfg, sim, jax.random.PRNGKey(0), bank)
    scenes = jax.vmap(env.take_scenario, in_axes=(None, 0))(bank, runner.scene_idx)
    state, *_, batch = jax.jit(ppo.make_rollout(net, cfg, sim, types.default_params()))(runner, scenes, shaping.none())
    ctrl, eligible = np.asarray(runner.env.controller), np.asarray(scenes.controllable)
    driven = np.any((ctrl == types.POLICY) & eligible, axis=1, keepdims=True)
    return state, batch, scenes, (ctrl == controller) & eligible & driven


def test_log_replay_share_follows_its_logs_and_stays_out_of_the_loss():
    """Mixed traffic (log_frac): LOG agents replay their logs whatever the policy does, never samples."""
    state, batch, scenes, logged = _mixed_rollout(_cfg(log_frac=0.5, rollout_steps=4), SIM, types.LOG)
    assert logged.any()
    assert not np.any(np.asarray(batch.valid)[:, logged])
    np.testing.assert_allclose(np.asarray(state.xy)[logged], np.asarray(scenes.log_xy[:, :, 4])[logged], atol=1e-4)
    with pytest.raises(ValueError, match="log_frac"):
        _cfg(log_frac=0.6, opponent_frac=0.5).validate(SIM)


def test_human_regularisation_pulls_the_policy_to_logged_actions():
    """SPICED-style: with bc_coef > 0 the update also lowers the NLL of the logged actions it is given."""
    bank, net = _bank(), networks.ActorCritic(NET)
    cfg = _cfg(bc_coef=1.0, lr=1e-2)
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(0), bank)
    state = jax.tree.map(lambda x: x[0], runner.env)
    obs = env.observe(state, env.take_scenario(bank, runner.scene_idx[0]), SIM)
    brake = jnp.full((SIM.max_agents,), 0 * 13 + 6, jnp.int32)
    human = (obs, brake, networks.live(obs).astype(jnp.float32))
    update = ppo.make_update(net, cfg, SIM, types.default_params())
    nll = []
    for _ in range(3):
        runner, stats = update(runner, bank, human=human)
        nll.append(float(stats["human_nll"]))
    assert nll[-1] < nll[0] - 0.5
    with pytest.raises(ValueError, match="bc_coef"):
        update(runner, bank)


def _shaped_rollouts(bank, net, cfg, seed, weights):
    """One compiled rollout of cfg from one start, run under each shaping in weights (never recompiled:
    the weights are arrays) -> (runner, scenes, [(final state, Batch)])."""
    runner = ppo.init(net, cfg, SIM, jax.random.PRNGKey(seed), bank)
    scenes = jax.vmap(env.take_scenario, in_axes=(None, 0))(bank, runner.scene_idx)
    fn = jax.jit(ppo.make_rollout(net, cfg, SIM, types.default_params()))
    outs = [fn(runner, scenes, w) for w in weights]
    assert fn._cache_size() == 1
    return runner, scenes, [(o[0], o[-1]) for o in outs]


def test_progress_shaping_pays_the_distance_gained_along_the_route():
    """progress_per_m adds coef x (progress in the step) per valid step: over steps where an agent
    stays in the world, the extra reward sums to coef x its progress along its lane route towards its
    goal."""
    bank, net = _bank(), networks.ActorCritic(dataclasses.replace(NET, condition=False))
    runner, scenes, [(state, batch), (_, shaped)] = _shaped_rollouts(
        bank, net, _cfg(conditioned=False), 3, [shaping.none(), shaping.make(progress_per_m=0.5)])
    extra = np.asarray(shaped.reward - batch.reward)  # [T, B, A]
    valid = np.asarray(batch.valid)
    np.testing.assert_array_equal(extra[~valid], 0.0)
    whole = valid.all(0)  # in the world for all T steps (no restart within the 10-step rollout)
    assert whole.sum() >= 4
    goal = shaping.goal_arc(scenes, SIM)
    gained = np.asarray(shaping.route_to_goal(runner.env, scenes, SIM, goal) - shaping.route_to_goal(
        state, scenes, SIM, goal))
    np.testing.assert_allclose(extra.sum(0)[whole], 0.5 * gained[whole], atol=1e-4)
    assert np.all(gained[whole] > 0.0)  # the cars start at 5 m/s towards their goals, along their routes
    with pytest.raises(ValueError, match="progress_per_m"):
        shaping.make(progress_per_m=-1.0)
    with pytest.raises(ValueError, match="shaping: unknown"):
        shaping.from_config({"progress_along": "goal"})


class _Routes(NamedTuple):
    route_xy: jax.Array
    route_len: jax.Array
    goal: jax.Array


def test_route_distance_to_the_goal_follows_the_route():
    """route_arc is the arc length of a point on the route (continuous between route points), grows
    with the distance driven along it, and is 0 without a route; the distance to the goal along the
    route counts either side of the goal (driving past it costs what it paid)."""
    r = 12
    route = jnp.stack([jnp.arange(r) * SIM.route_spacing, jnp.zeros(r)], -1)  # along +x, 2 m apart
    fields = dict(route_xy=jnp.zeros((1, 3, SIM.max_route_points, 2)).at[0, :2, :r].set(route),
                  route_len=jnp.array([[r, r, 0]], jnp.int32),
                  goal=jnp.array([[[16.0, 0.5], [16.0, 0.5], [9.0, 0.0]]]))  # 16 m along the route
    scenes = _Routes(**fields)  # a pytree holding the fields route_arc and goal_arc read
    xs = jnp.array([[[3.0, 0.4], [7.1, -0.3], [5.0, 0.0]]])  # on, beside, and with no route
    arc = jax.vmap(lambda sc, xy: controllers.route_arc(sc, xy, SIM))(scenes, xs)
    np.testing.assert_allclose(np.asarray(arc), [[3.0, 7.1, 0.0]], atol=1e-5)
    goal = shaping.goal_arc(scenes, SIM)
    to_goal = lambda xy: np.asarray(shaping.route_to_goal(SimpleNamespace(xy=xy), scenes, SIM, goal))  # noqa: E731
    np.testing.assert_allclose(to_goal(xs), [[13.0, 8.9, 0.0]], atol=1e-5)
    past = jnp.array([[[19.0, 0.0], [15.0, 0.0], [9.0, 0.0]]])
    np.testing.assert_allclose(to_goal(past), [[3.0, 1.0, 0.0]], atol=1e-5)


def test_comfort_scale_pays_a_share_of_the_comfort_term():
    """comfort_scale s charges s x alpha_comfort per comfort violation: with a policy that ignores its
    condition (same actions either way), s = 0 gives exactly the rewards of the same episodes with
    alpha_comfort zeroed in every condition, and s = 0.5 half of the refund; random actions jerk, so the
    refund is not empty."""
    scene = straight_road([(10.0, -2.0, 0.0, 5.0), (30.0, 2.0, np.pi, 5.0)],
                          goals=[(90.0, -2.0), (-50.0, 2.0)], name="apart")
    bank, net = make_bank([scene], SIM), networks.ActorCritic(dataclasses.replace(NET, condition=False))
    runner, scenes, outs = _shaped_rollouts(bank, net, _cfg(num_envs=2), 1, [
        shaping.none(), shaping.make(comfort_scale=0.0), shaping.make(comfort_scale=0.5)])
    base, free, half = (np.asarray(batch.reward) for _, batch in outs)
    i = types.COND_FIELDS.index("alpha_comfort")
    zeroed = runner.replace(env=runner.env.replace(cond=runner.env.cond.at[..., i].set(0.0)))
    fn = jax.jit(ppo.make_rollout(net, _cfg(num_envs=2), SIM, types.default_params()))
    np.testing.assert_allclose(free, np.asarray(fn(zeroed, scenes, shaping.none())[-1].reward), atol=1e-6)
    refund = free - base
    assert refund.max() > 1e-3 and refund.min() >= -1e-7
    np.testing.assert_allclose(half - base, 0.5 * refund, atol=1e-6)
    with pytest.raises(ValueError, match="comfort_scale"):
        shaping.make(comfort_scale=-0.5)


def test_collision_gain_charges_a_collision_by_the_condition():
    """collision_gain adds - gain x alpha_coll exactly on the steps where a policy agent collides:
    two cars 6 m apart head-on at 8 m/s meet within the 10-step rollout; a lone car far behind
    never collides, so it is charged nothing. By weight: gain x (alpha_coll / 3) x alpha_coll."""
    scene = straight_road([(10.0, -2.0, 0.0, 8.0), (16.0, -2.0, np.pi, 8.0), (-60.0, 2.0, np.pi, 5.0)],
                          goals=[(40.0, -2.0), (-10.0, -2.0), (-80.0, 2.0)], name="head_on")
    bank, net = make_bank([scene], SIM), networks.ActorCritic(NET)
    runner, _, outs = _shaped_rollouts(bank, net, _cfg(num_envs=2), 0, [
        shaping.none(), shaping.make(collision_gain=2.0), shaping.make(collision_gain=2.0, gain_by_weight=True)])
    base, plain_gain, by_weight = (np.asarray(batch.reward) for _, batch in outs)
    extra = plain_gain - base  # [T, B, A]
    hit = extra < -1e-6
    assert hit[:, :, :2].any(0).all(), hit.any(0)  # both head-on cars are charged, in both envs
    assert not hit[:, :, 2].any()
    # charged once each (removed on the collision), by 2 x its own episode alpha_coll
    np.testing.assert_array_equal(hit[:, :, :2].sum(0), 1)
    alpha = np.asarray(conditions.field(runner.env.cond, "alpha_coll"))[:, :2]  # [B, 2]
    np.testing.assert_allclose(extra[:, :, :2].sum(0), -2.0 * alpha, rtol=1e-5)
    scaled = by_weight - base
    np.testing.assert_allclose(scaled[:, :, :2].sum(0), -2.0 * alpha * alpha / 3.0, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.abs(scaled[~hit]).max(), 0.0)
    # the non-conditioned baseline's fixed reward gets no gain (nor comfort scale): they act on conditions
    fixed = shaping.from_config({"collision_gain": 2.0, "comfort_scale": 0.3}, conditioned=False)
    assert float(fixed.collision_gain) == 0.0 and float(fixed.comfort_scale) == 1.0
    with pytest.raises(ValueError, match="collision_gain"):
        shaping.make(collision_gain=-1.0)


def test_time_to_collision_sees_only_objects_ahead_in_the_path():
    """time_to_collision: the gap (less half the two lengths) over the closing speed along the agent's
    heading, to the nearest object ahead within the two half-widths + PATH_MARGIN (2.3 m here); inf
    when nothing ahead closes in; an oncoming car closes at the sum of the speeds; gone objects and
    gone agents are out."""
    # 0 follows 1 (0.5 m aside); 2 stands beside 0's path (2.6 m aside) and behind 1; 3 follows 0;
    # 4 comes the other way at 100 m; 5 pulls away from 0 and 1 at 30 m/s.
    xy = jnp.array([[[0.0, 0.0], [20.0, 0.5], [10.0, 2.6], [-10.0, 0.0], [100.0, 0.0], [30.0, 0.0]]])
    yaw = jnp.array([[0.0, 0.0, 0.0, 0.0, np.pi, 0.0]])
    speed = jnp.array([[15.0, 10.0, 0.0, 20.0, 5.0, 30.0]])
    size = SimpleNamespace(size=jnp.tile(jnp.array([4.5, 2.0]), (1, 6, 1)))
    alive = jnp.ones((1, 6), bool)
    ttc = np.asarray(shaping.time_to_collision(SimpleNamespace(xy=xy, yaw=yaw, speed=speed, alive=alive), size))
    want = [15.5 / 5.0, 75.5 / 15.0, np.inf, 5.5 / 5.0, 65.5 / 35.0, 65.5 / 35.0]
    np.testing.assert_allclose(ttc[0], want, rtol=1e-5)
    alive = alive.at[0, 1].set(False)
    ttc = np.asarray(shaping.time_to_collision(SimpleNamespace(xy=xy, yaw=yaw, speed=speed, alive=alive), size))
    np.testing.assert_allclose(ttc[0], [95.5 / 20.0, np.inf, np.inf, 5.5 / 5.0, 65.5 / 35.0, 65.5 / 35.0],
                               rtol=1e-5)


def test_ttc_gain_charges_closing_in_by_the_condition():
    """ttc_gain charges gain x dt x max(0, 1 - ttc / horizon) per step (x alpha_coll / 3 by weight): a car
    at 10 m/s 12 m behind a stopped one is charged, a lone car far away is not; the same episodes under
    twice the gain cost twice as much; the fixed-reward baseline gets no ttc cost."""
    scene = straight_road([(10.0, -2.0, 0.0, 10.0), (26.0, -2.0, 0.0, 0.0), (150.0, 2.0, np.pi, 5.0)],
                          goals=[(60.0, -2.0), (27.0, -2.0), (100.0, 2.0)], name="closing")
    bank, net = make_bank([scene], SIM), networks.ActorCritic(NET)
    runner, _, outs = _shaped_rollouts(bank, net, _cfg(num_envs=2), 0, [
        shaping.none(), shaping.make(ttc_gain=1.0), shaping.make(ttc_gain=2.0),
        shaping.make(ttc_gain=1.0, gain_by_weight=True)])
    base, one, two, by_weight = (np.asarray(batch.reward) for _, batch in outs)
    extra = one - base  # [T, B, A]
    assert (extra[0, :, 0] < -1e-3).all()  # the follower, at 1.15 s from the stopped car after one step
    assert extra[0, 0, 0] >= -SIM.dt - 1e-6
    np.testing.assert_array_equal(extra[:, :, 2], 0.0)
    np.testing.assert_allclose(two - base, 2.0 * extra, atol=1e-6)
    alpha = np.asarray(conditions.field(runner.env.cond, "alpha_coll"))  # [B, A]
    np.testing.assert_allclose(by_weight - base, extra * alpha[None] / 3.0, atol=1e-6)
    assert float(shaping.from_config({"ttc_gain": 1.0}, conditioned=False).ttc_gain) == 0.0
    with pytest.raises(ValueError, match="ttc_horizon"):
        shaping.make(ttc_horizon=0.0)


def test_start_noise_moves_only_fresh_policy_starts():
    """PPOConfig's start noise reaches the envs' fresh episodes (the same scenes, conditions and keys)."""
    bank = _bank()
    plain, idx = ppo.reset_envs(jax.random.PRNGKey(4), bank, _cfg(num_envs=4), SIM)
    noisy, idx2 = ppo.reset_envs(jax.random.PRNGKey(4), bank, _cfg(num_envs=4, start_offset=1.0,
                                                                  start_speed_scale=1.5), SIM)
    assert (np.asarray(idx) == np.asarray(idx2)).all() and (np.asarray(plain.key) == np.asarray(noisy.key)).all()
    policy = np.asarray(plain.controller == types.POLICY) & np.asarray(plain.alive)
    moved = np.abs(np.asarray(noisy.xy - plain.xy)).sum(-1) > 1e-4
    assert moved.any() and not moved[~policy].any()
    assert (np.asarray(noisy.speed)[policy] >= np.asarray(plain.speed)[policy] - 1e-6).all()
    with pytest.raises(ValueError, match="start_speed_scale"):
        _cfg(start_speed_scale=0.5).validate(SIM)
