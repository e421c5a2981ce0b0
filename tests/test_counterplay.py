"""CounterPlay: verification, retry choice, roots, snapshot replay, and a tiny round end to end."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.counterplay import backtrack, loop, record, selfplay, verify
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.scenarios.bank import make_bank
from cp_jax.sim import conditions, env, types
from cp_jax.sim.types import INF_T
from tests.support import assert_same
from tests.worlds import straight_road

SIM = types.SimConfig(
    max_agents=4, max_road_segments=256, max_lanes=4, log_steps=21, episode_steps=20,
    obs_partners=3, obs_road=16, grid_size=8, max_route_points=64, idm_lookahead=16, enable_idm=False,
)
NET = dataclasses.replace(networks.small(), set_width=16, trunk=(64,))
KEEP_GOING = 3 * 13 + 6  # accel 0, steer 0 on the 7 x 13 grid


def _bank():
    """Three eastbound cars at 10 m/s, each 10 m from its goal: under the cautious style (goal only
    at <= 5 m/s) a car that keeps going drives through its goal and times out; under the normal or
    aggressive style the same driving reaches it."""
    starts = [(10.0, -2.0, 0.0, 10.0), (40.0, -2.0, 0.0, 10.0), (70.0, -2.0, 0.0, 10.0)]
    return make_bank([straight_road(starts, goals=[(20.0, -2.0), (50.0, -2.0), (80.0, -2.0)], name="three")], SIM)


def _shifted_bank(shifts):
    """One scene per shift: _bank's three cars and goals moved dx metres east on a 400 m road."""
    return make_bank([straight_road([(x + dx, -2.0, 0.0, 10.0) for x in (10.0, 40.0, 70.0)],
                                    goals=[(x + dx, -2.0) for x in (20.0, 50.0, 80.0)], length=400.0, name=f"s{dx:g}")
                      for dx in shifts], SIM)


@pytest.fixture
def cautious_records(monkeypatch):
    """Records drive every agent under the cautious style instead of sampled conditions (records sample
    them with conditions.sample): the keep-going cars of _bank then all time out."""
    cautious = conditions.style("cautious")
    monkeypatch.setattr(record.conditions, "sample",
                        lambda key, shape=(): jnp.broadcast_to(cautious, (*shape, types.COND_DIM)))


def _keep_going_params():
    """A policy that mostly keeps going (accel 0, steer 0) whatever it sees (its other logits
    still depend a little on the observation and condition), with a constant critic (so the value
    rule's root is the window's first step: ties go to the earliest)."""
    p = networks.init_params(NET, SIM, jax.random.PRNGKey(0))["params"]
    actor = dict(p["actor"], bias=p["actor"]["bias"].at[KEEP_GOING].add(7.0))
    critic = dict(p["critic"], kernel=jnp.zeros_like(p["critic"]["kernel"]))
    return {"params": dict(p, actor=actor, critic=critic)}


def _states(first_collision, first_offroad, goal):
    """A batch of final states [N, A] with the given event times (other fields from a reset)."""
    bank = _bank()
    s = env.reset(env.take_scenario(bank, 0), jax.random.PRNGKey(0), conditions.style("normal"), SIM)
    n = len(goal)
    s = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), s)
    arr = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return s.replace(first_collision_t=arr(first_collision), first_offroad_t=arr(first_offroad), goal_t=arr(goal))


def test_verify_rejects_a_retry_that_makes_another_car_collide_earlier():
    never = INF_T
    # Agent 0 is the failing agent; agent 1 collides at step 15 in the factual branch.
    factual = _states([[never, 15, never, never]] * 4, [[never] * 4] * 4, [[never] * 4] * 4)
    retry = _states(
        [[never, 12, never, never],  # agent 1 collides earlier: rejected
         [never, 18, never, never],  # later than in the factual branch: accepted
         [never, 15, 9, never],  # agent 2 gets a new collision: rejected
         [11, 15, never, never]],  # the failing agent itself collides: rejected
        [[never] * 4] * 4,
        [[10, never, never, never]] * 4,  # agent 0 reaches its goal at step 10 in every retry
    )
    agent = jnp.zeros((4,), jnp.int32)
    np.testing.assert_array_equal(verify.passes(factual, retry, agent), [False, True, False, False])
    # Without the safety check (ablation S off) only the agent's own outcome counts.
    np.testing.assert_array_equal(verify.passes(factual, retry, agent, check_others=False), [True, True, True, False])
    # A new off-road of another agent is harm too.
    offroad = _states([[never] * 4], [[never, never, never, 7]], [[10, never, never, never]])
    assert not bool(verify.passes(_states([[never] * 4], [[never] * 4], [[never] * 4]), offroad, agent[:1])[0])


def test_choose_prefers_the_style_closest_to_deployment_then_the_earliest_goal():
    cfg = CounterPlayConfig(deploy_style="normal")
    rank = cfg.style_rank()
    assert list(np.argsort(rank)[:1]) == [cfg.styles.index("normal")]
    r = len(cfg.styles)
    ok = np.zeros((3, 2, r), bool)
    goal = np.full((3, 2, r), 50, np.int32)
    ok[0, 0, cfg.styles.index("aggressive")] = ok[0, 1, cfg.styles.index("normal")] = True  # normal wins
    ok[1, :, cfg.styles.index("cautious")] = True
    goal[1, 0, cfg.styles.index("cautious")] = 40  # same style in both samples: the earlier goal wins
    found, m, b = verify.choose(jnp.asarray(ok), jnp.asarray(goal), rank)
    np.testing.assert_array_equal(found, [True, True, False])
    assert (int(m[0]), cfg.styles[int(b[0])]) == (1, "normal")
    assert (int(m[1]), cfg.styles[int(b[1])]) == (0, "cautious")
    # Deploying aggressive makes the aggressive retry the first choice.
    agg = CounterPlayConfig(deploy_style="aggressive").style_rank()
    found, m, b = verify.choose(jnp.asarray(ok), jnp.asarray(goal), agg)
    assert cfg.styles[int(b[0])] == "aggressive"


def test_roots_value_argmax_in_the_window_fixed_rewind_and_none():
    t, a = 20, 4
    value = np.zeros((1, t, a), np.float32)
    value[0, :, 1] = np.arange(t)[::-1] * 0.1  # decreasing: the window's first step is the argmax
    value[0, 3, 1] = 9.0  # outside the window [t_fail - H, t_fail - 1] for H = 5: ignored
    value[0, 13, 1] = 5.0  # inside: chosen
    alive = jnp.ones((1, t, a), bool)
    rec = record.Recording(scene_idx=jnp.zeros((1,), jnp.int32), scenes=None, states=None, alive=alive,
                           value=jnp.asarray(value), final=None, controlled=None, agent_steps=None)
    picked = record.Picked(env=jnp.array([0, 0]), agent=jnp.array([1, 1]), kind=jnp.array([0, 0]),
                           t_fail=jnp.array([16, 3]), valid=jnp.array([True, True]))
    cfg = CounterPlayConfig(window=5)
    np.testing.assert_array_equal(backtrack.choose_root(rec, picked, cfg), [13, 0])  # t_fail 3: window [0, 2]
    np.testing.assert_array_equal(backtrack.choose_root(rec, picked, dataclasses.replace(cfg, root_rule="fixed")),
                                  [11, 0])
    np.testing.assert_array_equal(backtrack.choose_root(rec, picked, dataclasses.replace(cfg, root_rule="none")),
                                  [0, 0])


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="root_rule"):
        CounterPlayConfig(root_rule="latest")
    with pytest.raises(ValueError, match="failure_kinds"):
        CounterPlayConfig(failure_kinds=("stall",))
    with pytest.raises(ValueError, match="unknown style"):
        CounterPlayConfig(deploy_style="sporty")
    with pytest.raises(ValueError, match="window"):
        CounterPlayConfig(window=0)
    with pytest.raises(ValueError, match="max_failures"):
        loop.make_round(networks.ActorCritic(NET), CounterPlayConfig(num_envs=1, max_failures=5), SIM,
                        types.default_params())


def test_snapshot_replays_the_recorded_episode():
    """Driving again from any recorded state (its key included) reproduces the recorded final state
    (the same steps and events; positions to float rounding: two programs, tests/support.py)."""
    bank, net = _bank(), networks.ActorCritic(NET)
    p = networks.init_params(NET, SIM, jax.random.PRNGKey(3))  # a random policy: sampled actions matter
    cfg = CounterPlayConfig(num_envs=2)
    rec = jax.jit(lambda k: record.record(net, p, bank, k, cfg, types.default_params(), SIM))(jax.random.PRNGKey(4))
    t = 7
    start = jax.tree.map(lambda x: x[1, t], rec.states)
    final, _ = jax.jit(lambda s: selfplay.drive(net, p, s, env.take_scenario(bank, 0), types.default_params(), SIM,
                                                SIM.episode_steps))(start)
    for name in ("xy", "speed", "goal_t", "first_collision_t", "first_offroad_t", "alive"):  # two programs
        assert_same(getattr(final, name), getattr(rec.final, name)[1], err_msg=name)

    # Every 4th snapshot only: the same episodes, a quarter of the states; restoring any step
    # replays the recorded policy from the snapshot before it and lands on the recorded state.
    cfg4 = dataclasses.replace(cfg, snapshot_every=4)
    rec4 = jax.jit(lambda k: record.record(net, p, bank, k, cfg4, types.default_params(), SIM))(jax.random.PRNGKey(4))
    assert rec4.states.xy.shape[1] == -(-SIM.episode_steps // 4) and rec4.alive.shape == rec.alive.shape
    jax.tree.map(assert_same, rec4.states, jax.tree.map(lambda x: x[:, ::4], rec.states))
    for name in ("value", "alive", "agent_steps"):
        assert_same(getattr(rec4, name), getattr(rec, name), err_msg=name)
    picked = record.Picked(env=jnp.array([1, 0, 1]), agent=jnp.array([0, 0, 1]), kind=jnp.zeros(3, jnp.int32),
                           t_fail=jnp.full(3, 10), valid=jnp.ones(3, bool))
    root = jnp.array([7, 8, 3])  # mid-chunk, on a snapshot, mid-chunk
    restored, _ = jax.jit(lambda r: backtrack.restore(rec4, picked, r, 4, backtrack.make_replay(
        net, cfg4, SIM, types.default_params())(p)))(root)
    want = jax.tree.map(lambda x: x[picked.env, root], rec.states)
    for name in ("xy", "yaw", "speed", "t", "key", "alive"):
        np.testing.assert_allclose(getattr(restored, name), getattr(want, name), atol=1e-5, err_msg=name)


def test_grouped_bank_records_each_env_from_its_own_group():
    """bank_groups=2 over four scenes (the cars shifted 0, 80, 160, 240 m): envs 0-1 record scenes
    of group 0 (scenes 0, 1), envs 2-3 of group 1 (scenes 2, 3), and the recording carries them."""
    flat = _shifted_bank([0.0, 80.0, 160.0, 240.0])
    grouped = env.group_bank(flat, 2)
    net = networks.ActorCritic(NET)
    p = networks.init_params(NET, SIM, jax.random.PRNGKey(3))
    cfg = CounterPlayConfig(num_envs=4, max_failures=2, bank_groups=2)
    with pytest.raises(ValueError, match="bank_groups"):
        record.record(net, p, flat, jax.random.PRNGKey(0), cfg, types.default_params(), SIM)  # not grouped
    with pytest.raises(ValueError, match="bank_groups"):
        CounterPlayConfig(num_envs=4, bank_groups=3)
    for key in range(3):
        rec = record.record(net, p, grouped, jax.random.PRNGKey(key), cfg, types.default_params(), SIM)
        scene = np.arange(4) // 2 * 2 + np.asarray(rec.scene_idx)  # index into the flat bank
        np.testing.assert_array_equal(rec.scenes.log_xy, flat.log_xy[scene])
        np.testing.assert_allclose(rec.states.xy[:, 0, 0, 0], 10.0 + 80.0 * scene)  # episodes start in them


def test_a_tiny_round_end_to_end_repairs_a_timeout(cautious_records):
    """Recorded under the cautious style the keep-going cars time out; the search finds the timeouts,
    branches from the root, a style whose goal speed allows 10 m/s passes and is verified again, and
    distillation into the deployment condition changes the parameters. The record keeps a snapshot
    every 3 steps (the roots are replayed from the snapshot before them; every step's snapshots:
    test_snapshot_replays_the_recorded_episode) and the bank is in two groups. The student gate
    runs too: under the cautious style every car of both policies times out (0 points each), so the
    update is kept, and the gate's runs are charged."""
    groups = 2
    bank, net = _bank(), networks.ActorCritic(NET)
    bank = env.group_bank(jax.tree.map(lambda x: jnp.concatenate([x] * groups), bank), groups)
    anchor = _keep_going_params()
    cfg = CounterPlayConfig(num_envs=2, max_failures=4, root_rule="value", window=20,
                            styles=("cautious", "aggressive"), deploy_style="cautious", distill_steps=3,
                            distill_batch=32, reg_states=2, lr=1e-3, snapshot_every=3, bank_groups=groups,
                            student_gate=True, gate_envs=2)
    round_fn = loop.make_round(net, cfg, SIM, types.default_params())
    state, diag = round_fn(loop.init(anchor, cfg, jax.random.PRNGKey(5)), anchor, bank)
    diag = jax.device_get(diag)
    assert diag["record_timeout_rate"] == 1.0  # every car drove through its goal too fast
    assert diag["picked"] == 4 and diag["picked_timeout"] == 4
    assert diag["root_back"] == 20  # timeouts fail at step 20; H = 20: the root is the first frame
    assert diag["factual_goal"] == 0  # the factual branch (cautious) fails again
    np.testing.assert_array_equal(diag["passed_style"], [0, 4])  # only the aggressive retry reaches the goal
    np.testing.assert_array_equal(diag["verified_style"], [0, 4])
    assert diag["repaired"] == 4 and diag["distilled_samples"] > 0
    assert diag["distill_loss"] > 1e-6  # teacher (aggressive) and student (cautious) differ
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.params, anchor)
    assert any(jax.tree.leaves(changed))
    # Budget: the record (6 cars x 20 steps at most) plus 4 failures x 3 branches plus 4 x 2 re-runs
    # (plus, gated, 2 policies x 2 scenes x 3 egos x 20 steps).
    assert diag["round_steps"] > 0 and float(state.agent_steps) == pytest.approx(float(diag["round_steps"]))
    assert float(state.agent_steps) <= 6 * 20 + 4 * 3 * 3 * 20 + 4 * 2 * 3 * 20 + 2 * 2 * 3 * 20
    assert diag["gate_accepted"] == 1.0 and diag["gate_old"] == diag["gate_new"] == 0.0


def test_component_switches_each_change_what_a_round_does(cautious_records):
    """Table II's switches, each off once on the tiny round of the test above (value root, H = 20):
    C off (condition_search): retries keep the failing (cautious) condition, so none reaches its goal and
    nothing is repaired; S off (verify_others, reverify): no re-run, so the round charges 4 failures x
    2 re-run branches x 3 cars x 20 steps less; D off (deploy_distill): the student learns under the
    failing agent's own condition instead of the deployment one, so the parameters differ."""
    bank, net = _bank(), networks.ActorCritic(NET)
    anchor = _keep_going_params()
    base = CounterPlayConfig(num_envs=2, max_failures=4, root_rule="value", window=20,
                             styles=("cautious", "aggressive"), deploy_style="normal", distill_steps=3,
                             distill_batch=32, reg_states=2, lr=1e-3)

    def run(**switches):
        cfg = dataclasses.replace(base, **switches)
        state, diag = loop.make_round(net, cfg, SIM, types.default_params())(
            loop.init(anchor, cfg, jax.random.PRNGKey(5)), anchor, bank)
        return state, jax.device_get(diag)

    full_state, full = run()
    assert full["repaired"] == 4
    _, no_c = run(condition_search=False)
    assert no_c["repaired"] == 0 and no_c["passed_style"].sum() == 0  # both retries stay cautious: timeouts
    _, no_s = run(verify_others=False, reverify=False)
    assert no_s["repaired"] == 4
    assert full["round_steps"] - no_s["round_steps"] == pytest.approx(4 * 2 * 3 * 20, rel=0.25)  # no re-runs
    no_d_state, no_d = run(deploy_distill=False)
    assert no_d["repaired"] == 4 and no_d["distilled_samples"] == full["distilled_samples"]
    differ = jax.tree.map(lambda a, b: bool(jnp.any(jnp.abs(a - b) > 1e-7)), no_d_state.params, full_state.params)
    assert any(jax.tree.leaves(differ))  # same samples, another student condition


def test_style_distillation_round_moves_the_deployed_policy_towards_the_style():
    """Aggressive distillation: on recorded states, the student under the cautious condition is
    pulled towards the anchor under the aggressive one (its KL to that teacher goes down); the
    budget is the recorded episodes alone (no search)."""
    bank, net = _bank(), networks.ActorCritic(NET)
    p = networks.init_params(NET, SIM, jax.random.PRNGKey(1))["params"]
    anchor = {"params": dict(p, actor=dict(p["actor"], kernel=100.0 * p["actor"]["kernel"]))}  # sharp, cond-dependent
    cfg = CounterPlayConfig(deploy_style="cautious", num_envs=2, max_failures=2, distill_steps=20, distill_batch=32,
                            reg_states=1, anchor_kl=0.0, value_coef=0.0, lr=1e-3)
    round_fn = loop.make_round(net, cfg, SIM, types.default_params(), teacher_style="aggressive")
    state, diag = round_fn(loop.init(anchor, cfg, jax.random.PRNGKey(2)), anchor, bank)
    s0 = env.reset(env.take_scenario(bank, 0), jax.random.PRNGKey(7), conditions.style("normal"), SIM)
    obs = env.observe(s0, env.take_scenario(bank, 0), SIM)  # a state the records start from
    live = s0.alive & (s0.controller == types.POLICY)
    teacher = net.apply(anchor, networks.with_condition(obs, conditions.style("aggressive")))[0]
    kl = lambda p: float(jnp.sum(jnp.where(live, dist.kl(teacher, net.apply(  # noqa: E731
        p, networks.with_condition(obs, conditions.style("cautious")))[0]), 0.0)))
    assert kl(state.params) < 0.5 * kl(anchor)
    assert 0 < float(diag["round_steps"]) <= 2 * 3 * 20  # 2 recorded episodes of 3 cars x 20 steps, nothing else


def test_ppo_rewind_restarts_envs_from_failure_roots(cautious_records):
    """PPO-Rewind: the cautious keep-going cars all time out (t_fail 20); with a fixed rewind of 8
    decisions every PPO env restarts at step 12 of a recorded episode, conditions unchanged."""
    from cp_jax.counterplay import rewind
    from cp_jax.rl import ppo

    bank, net = _bank(), networks.ActorCritic(NET)
    params = _keep_going_params()
    cfg = CounterPlayConfig(num_envs=2, root_rule="fixed", window=8)
    ppo_cfg = ppo.PPOConfig(num_envs=3, rollout_steps=5, num_minibatches=1, sample_capacity=1.0)
    runner = ppo.init(net, ppo_cfg, SIM, jax.random.PRNGKey(0), bank).replace(params=params)
    out, rewound = rewind.make_rewind(net, cfg, ppo_cfg, SIM, types.default_params())(runner, bank)
    assert int(rewound) == 3
    np.testing.assert_array_equal(out.env.t, [12, 12, 12])
    np.testing.assert_allclose(out.env.cond[:, :3], np.broadcast_to(conditions.style("cautious"), (3, 3, 10)))
    assert float(out.agent_steps) == 2 * 3 * 20  # the record: 2 episodes x 3 cars x 20 steps


def test_student_gate_keeps_an_update_only_if_the_student_drives_no_worse():
    """Under the normal style the keep-going policy reaches all three goals of the scene; a policy
    that steers hard leaves the road. The gate (each controllable agent the one policy ego among
    log-replayed traffic: 2 scenes x 3 egos) accepts keep-going over it, rejects the reverse, and
    charges both greedy runs (the gate inside a round: test_a_tiny_round_end_to_end_repairs_a_timeout)."""
    from cp_jax.counterplay.gate import make_gate

    bank, net = _bank(), networks.ActorCritic(NET)
    good = _keep_going_params()
    p = good["params"]
    hard_left = KEEP_GOING - 6  # accel 0, the steering grid's end
    bad = {"params": dict(p, actor=dict(p["actor"], bias=p["actor"]["bias"].at[hard_left].add(20.0)))}
    cfg = CounterPlayConfig(num_envs=2, max_failures=2, deploy_style="normal", student_gate=True, gate_envs=2)
    gate = jax.jit(make_gate(net, cfg, SIM, types.default_params()))
    accept, diag, steps = gate(bad, good, bank, jax.random.PRNGKey(0))
    assert bool(accept) and float(diag["gate_new"]) == 6.0  # 2 scenes x 3 goals
    assert float(diag["gate_old"]) < 0.0  # off the road before the goals
    accept, _, _ = gate(good, bad, bank, jax.random.PRNGKey(0))
    assert not bool(accept)
    assert 2 * 2 * 3 < float(steps) < 2 * 2 * 3 * 20  # both policies, 2 scenes x 3 egos, gone before the end
    cautious = jax.jit(make_gate(net, dataclasses.replace(cfg, deploy_style="cautious"), SIM, types.default_params()))
    accept, diag, steps = cautious(good, good, bank, jax.random.PRNGKey(0))
    assert bool(accept) and float(diag["gate_old"]) == 0.0  # too fast for the cautious goal: all time out
    assert float(steps) == 2 * 2 * 3 * 20  # ... so every ego is charged every step, in both runs
    with pytest.raises(ValueError, match="gate_envs"):
        CounterPlayConfig(student_gate=True, gate_envs=3, num_envs=4, bank_groups=2)


def test_anchor_regulariser_reads_the_recorded_condition():
    """The anchor KL on fresh rows reads the rows' own (recorded) conditions; the same rows under the
    deployment condition are reported beside it (deploy_kl) and enter no loss."""
    from cp_jax.counterplay import distill

    bank, net = _bank(), networks.ActorCritic(NET)
    anchor = networks.init_params(NET, SIM, jax.random.PRNGKey(0))
    student = jax.tree.map(lambda x: x * 1.3, anchor)
    s = env.reset(env.take_scenario(bank, 0), jax.random.PRNGKey(1), conditions.style("cautious"), SIM)
    obs = env.observe(s, env.take_scenario(bank, 0), SIM)
    mask = s.controller == types.POLICY
    mb = distill.Buffer(obs=obs, action=jnp.zeros((SIM.max_agents,), jnp.int32),
                        teacher_cond=jnp.broadcast_to(conditions.style("aggressive"), (SIM.max_agents, 10)),
                        student_cond=jnp.broadcast_to(conditions.style("normal"), (SIM.max_agents, 10)),
                        weight=jnp.zeros(SIM.max_agents))  # no distillation sample: the regulariser alone
    kl_under = lambda c: float(jnp.sum(jnp.where(mask, dist.kl(  # noqa: E731
        net.apply(anchor, networks.with_condition(obs, c))[0],
        net.apply(student, networks.with_condition(obs, c))[0]), 0.0)) / float(mask.sum()))
    cfg = CounterPlayConfig(anchor_kl=2.0, value_coef=0.0, deploy_style="normal")
    total, stats = distill.make_loss(net, cfg)(student, anchor, anchor, mb, obs, mask)
    assert float(stats["anchor_kl"]) == pytest.approx(kl_under(conditions.style("cautious")), rel=1e-4)
    assert float(stats["deploy_kl"]) == pytest.approx(kl_under(conditions.style("normal")), rel=1e-4)
    assert float(stats["anchor_kl"]) != pytest.approx(float(stats["deploy_kl"]), rel=1e-3)
    assert float(total) == pytest.approx(2.0 * float(stats["anchor_kl"]), rel=1e-5)
