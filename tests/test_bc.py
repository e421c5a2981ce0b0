"""Behaviour cloning (cp_jax.rl.bc): closed-loop labels reproduce the logs, observations are taken at the
tracked states, training fits the labels, and the result is an ordinary saved policy."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.io.metrics import read_jsonl
from cp_jax.policy import networks, saved
from cp_jax.rl import bc
from cp_jax.scenarios.builder import build_scenario
from cp_jax.sim import conditions, dynamics, env, types
from tests.worlds import small_config, straight_road

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG = small_config(log_steps=91, episode_steps=90, remove_on_event=False)  # 9 s logs, keep driving
BC = bc.BCConfig(epochs=20, batch_size=128, lr=3e-3, scene_chunk=2, noisy_passes=1, noise_prob=0.1)
NET = dataclasses.replace(networks.small(), set_width=16, trunk=(64,), condition=False, chunk=0)
# Stated tolerance of the closed-loop labels (metres from the log, worst agent and step); measured 0.23 m.
TRACK_TOL = 0.5


def _bicycle_log(x, y, yaw, v, accel, delta, length=4.5, steps=91, dt=0.1):
    """A log made by the classic bicycle (no actuator, continuous controls: not on the action grid).
    accel, delta: functions of time in s. -> (xy [T, 2], yaw [T], vel [T, 2])."""
    xy, yaw_a, v_a = jnp.array([[x, y]]), jnp.array([yaw]), jnp.array([v])
    out = [(xy[0], yaw_a[0], v_a[0])]
    for k in range(steps - 1):
        t = k * dt
        xy, yaw_a, v_a = dynamics.bicycle_step(xy, yaw_a, v_a, jnp.array([accel(t)]), jnp.array([delta(t)]),
                                               jnp.array([length]), 0.6, 40.0, 5.0, dt)
        out.append((xy[0], yaw_a[0], v_a[0]))
    xy = np.array([o[0] for o in out])
    yaw = np.array([o[1] for o in out])
    speed = np.array([o[2] for o in out])
    return xy, yaw, speed[:, None] * np.stack([np.cos(yaw), np.sin(yaw)], -1)


def _scene(curves: list[tuple], straight: list[tuple], name: str):
    """Straight constant-speed agents (x, y, yaw, v) plus bicycle-logged agents (x, y, yaw, v, accel, delta);
    goals far away (no one is removed at its goal while a test replays the labels)."""
    starts = [s[:4] for s in straight + curves]
    raw = straight_road(starts, goals=[(1000.0, 1000.0)] * len(starts), steps=CFG.log_steps, name=name)
    for j, c in enumerate(curves):
        i = len(straight) + j
        raw.log_xy[i], raw.log_yaw[i], raw.log_vel[i] = _bicycle_log(*c)
    return build_scenario(raw, CFG)


def _curvy_scene():
    return _scene(
        curves=[
            (60.0, -2.0, 0.0, 8.0, lambda t: 0.8 if t < 3 else (0.0 if t < 6 else -1.0),
             lambda t: 0.06 * np.sin(2 * np.pi * t / 6.0)),  # speed up, S-bend, brake
            (150.0, 2.0, np.pi, 3.0, lambda t: 1.5 if t < 4 else -0.5, lambda t: -0.15 if 2 < t < 5 else 0.0),
        ],
        straight=[(20.0, -2.0, 0.0, 10.0), (120.0, 2.0, np.pi, 6.0)],
        name="curvy",
    )


def test_closed_loop_labels_reproduce_the_log():
    scenario = _curvy_scene()
    params = types.default_params()
    track = jax.jit(bc.track_log, static_argnums=(2, 3))(scenario, params, CFG, BC, jax.random.PRNGKey(0),
                                                          jnp.float32(0.0))
    assert bool(track.tracked[:4].all()) and not bool(track.tracked[4:].any())
    assert bool(track.valid[:4].all())
    np.testing.assert_array_equal(track.action, track.executed)  # noise-free
    # Constant speed on a straight line: "keep going" (accel 0, steer 0) throughout, no error.
    assert bool(jnp.all(track.action[:2] == bc.n_keep_going(params)))
    assert float(track.err[:2].max()) < 1e-3
    # Logs made with continuous controls (not the grid): the labels stay within TRACK_TOL m of them.
    err = np.asarray(track.err[2:4])
    print("label tracking error: max", err.max(), "final", err[:, -1], "mean", err.mean())
    assert err.max() < TRACK_TOL

    # The labels are commands of the real simulator: replaying them through env.step gives the tracked poses.
    state = env.reset(scenario, jax.random.PRNGKey(0), conditions.style("normal"), CFG)
    assert bool(jnp.all(state.controller[:4] == types.POLICY))
    replay = lambda p, obs, s, k: p[:, s.t]  # noqa: E731
    _, traj = jax.jit(env.rollout, static_argnums=(0, 5, 6), static_argnames="keep_states")(
        replay, track.action, state, scenario, params, CFG, CFG.episode_steps, keep_states=True)
    np.testing.assert_allclose(np.moveaxis(np.asarray(traj.state.xy), 0, 1)[:4], track.xy[:4, :-1], atol=1e-3)
    np.testing.assert_allclose(np.moveaxis(np.asarray(traj.state.steer), 0, 1)[:4], track.steer[:4, :-1], atol=1e-5)

    # Observations: the agent at its tracked state and actuator, everyone else at the log.
    obs = jax.jit(bc.observe_track, static_argnums=(2, 3))(scenario, track, CFG, "normal")
    i, t = 2, 37
    world = state.replace(
        t=jnp.int32(t), xy=scenario.log_xy[:, t].at[i].set(track.xy[i, t]),
        yaw=scenario.log_yaw[:, t].at[i].set(track.yaw[i, t]),
        speed=dynamics.log_speed(scenario.log_vel[:, t], scenario.log_yaw[:, t]).at[i].set(track.speed[i, t]),
        accel=jnp.zeros(CFG.max_agents).at[i].set(track.accel[i, t]),
        steer=jnp.zeros(CFG.max_agents).at[i].set(track.steer[i, t]),
        alive=scenario.agent_valid & scenario.log_valid[:, t],
    )
    expect = env.observe(world, scenario, CFG)
    for got, want in zip(jax.tree.leaves(jax.tree.map(lambda x: x[i, t], obs)),
                         jax.tree.leaves(jax.tree.map(lambda x: x[i], expect)), strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=1e-5)
    np.testing.assert_allclose(obs.ego[i, t, 7:], [track.accel[i, t] / 4.0, track.steer[i, t]], atol=1e-6)
    assert bool(obs.partner_mask[i, t, :3].all())  # the three others, at their logged poses


def test_training_fits_labels_and_round_trips(tmp_path):
    scenes = [
        _curvy_scene(),
        _scene([(30.0, -2.0, 0.0, 12.0, lambda t: -1.2 if t < 5 else 0.0, lambda t: 0.0)],
               [(100.0, 2.0, np.pi, 4.0)], "brake"),
        _scene([(10.0, -2.0, 0.0, 2.0, lambda t: 1.0, lambda t: 0.05 if t > 4 else 0.0)],
               [(120.0, -2.0, 0.0, 8.0)], "launch"),
    ]
    bank = env.stack_scenarios(scenes)
    data, stats = bc.make_dataset(bank, types.default_params(), CFG, BC, jax.random.PRNGKey(1))
    assert stats["tracked_agents"] == 8 and stats["clean_samples"] == 8 * CFG.episode_steps
    assert stats["noisy_samples"] > 0.9 * stats["clean_samples"]  # some may drift beyond max_track_error
    assert stats["final_error_max"] < TRACK_TOL
    assert data.obs.ego.shape == (stats["samples"], types.EGO_DIM)

    data = jax.device_put(bc.pad(data, BC.batch_size))
    assert data.action.shape[0] % BC.batch_size == 0 and float(data.weight.sum()) == stats["samples"]
    net = networks.ActorCritic(NET)
    params = networks.init_params(NET, CFG, jax.random.PRNGKey(0))
    steps = BC.epochs * data.action.shape[0] // BC.batch_size
    optimizer = bc.make_optimizer(BC, steps)
    opt_state = optimizer.init(params)
    epoch = bc.make_epoch(net, BC, optimizer)
    evaluate = bc.make_evaluate(net, BC.batch_size)
    before = evaluate(params, data)
    history = []
    for e in range(BC.epochs):
        params, opt_state, stats_e = epoch(params, opt_state, data, jax.random.PRNGKey(e))
        history.append({k: float(v) for k, v in stats_e.items()})
    after = evaluate(params, data)
    print("loss", float(before["loss"]), "->", float(after["loss"]),
          "accuracy", float(before["accuracy"]), "->", float(after["accuracy"]))
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    assert float(after["loss"]) < 0.5 * float(before["loss"])
    assert float(after["accuracy"]) > float(before["accuracy"]) + 0.3

    saved.save(str(tmp_path / "bc"), NET, params, CFG)
    back = saved.load(str(tmp_path / "bc"))
    assert back.net.cfg == NET and not back.net.cfg.condition and back.sim == CFG
    obs = jax.tree.map(lambda x: x[:64], data.obs)
    np.testing.assert_array_equal(back.net.apply(back.params, obs)[0], net.apply(params, obs)[0])


def test_config_is_validated_naming_the_field():
    from cp_jax.jobs import clone as train_bc
    from experiments import bc_small

    setup = train_bc.resolve(bc_small.get_config())
    assert not setup.net.condition and setup.net == dataclasses.replace(networks.small(), condition=False)
    c = bc_small.get_config()
    c.net.overrides.condition = True  # an anchor-shaped clone (train_anchor's init_from)
    assert train_bc.resolve(c).net == networks.small()
    bad = [("horizon", 0), ("noise_prob", 2.0), ("lr_schedule", "step"), ("style", "sporty"), ("w_smooth", -1.0)]
    for field, value in bad:
        c = bc_small.get_config()
        c.bc[field] = value
        with pytest.raises(ValueError, match=f"config.bc.{field}"):
            train_bc.resolve(c)
    c = bc_small.get_config()
    c.bc.epoch = 3  # unknown field
    with pytest.raises(ValueError, match=r"config\.bc: unknown"):
        train_bc.resolve(c)
    c = bc_small.get_config()
    c.scenes.eval_seed = 50
    with pytest.raises(ValueError, match="config.scenes.eval_seed"):
        train_bc.resolve(c)


def test_real_cache_config(tmp_path):
    """A real-scene cache built with more slots is labelled with its own sizes and the training observation
    sizes; one that cannot provide them is refused naming config.scenes.real."""
    from cp_jax.jobs import clone as train_bc
    from experiments import bc_small

    sim = train_bc.resolve(bc_small.get_config()).sim
    built = types.SimConfig(max_agents=128, max_road_segments=4096, max_lanes=512)  # launch.build_scenes' default
    (tmp_path / "sim_config.json").write_text(json.dumps(dataclasses.asdict(built)))
    cfg = train_bc.real_config(str(tmp_path), sim)
    assert (cfg.max_agents, cfg.obs_road, cfg.obs_partners, cfg.grid_size) == (128, sim.obs_road, 31, built.grid_size)
    (tmp_path / "sim_config.json").write_text(json.dumps(dataclasses.asdict(dataclasses.replace(built, obs_road=32))))
    c = bc_small.get_config()
    c.scenes.real = str(tmp_path)
    with pytest.raises(ValueError, match="config.scenes.real"):
        train_bc.resolve(c)
    c.scenes.real = str(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="config.scenes.real"):
        train_bc.resolve(c)


def test_shipped_smart_bc_loads_and_drives():
    folder = os.path.join(ROOT, "assets", "anchors", "smart_bc")
    if not os.path.exists(folder):
        pytest.skip("assets/anchors/smart_bc not shipped yet")
    from cp_jax.rl import evaluate

    pol = saved.load(folder)
    assert not pol.net.cfg.condition
    with open(os.path.join(folder, "README.md")) as f:
        assert "SMART stand-in (BC): behaviour cloning on inverse-dynamics labels, not SMART" in f.read()
    sim = small_config(obs_partners=pol.sim.obs_partners, obs_road=pol.sim.obs_road)
    bank = env.stack_scenarios([build_scenario(straight_road([(10.0, -2.0, 0.0, 5.0), (40.0, -2.0, 0.0, 5.0)]),
                                               sim)])
    r = evaluate.evaluate(pol.net, pol.params, bank, conditions.style("normal"), types.default_params(), sim,
                     jax.random.PRNGKey(0))
    assert int(r["controlled"].sum()) == 2
    assert float(np.asarray(r["mean_speed"])[0, 0]) > 0.5  # it drives


def test_clone_job_writes_its_outputs_and_resumes(tmp_path):
    """The behaviour-cloning job (launch.train_bc's) on two tiny procedural scenes: labels, one metric
    line and one checkpoint per epoch, the policy; run again in the same folder it resumes after the
    last epoch (nothing re-trained, the same policy)."""
    from cp_jax.jobs import clone
    from experiments import bc_small

    c = bc_small.get_config()
    c.scenes.update(train=2, eval=0, agents=3, cache_dir=str(tmp_path / "cache"))
    c.sim.update(max_agents=8, obs_road=16)
    c.bc.update(epochs=2, batch_size=64, noisy_passes=0)
    c.train.progress = False
    work = tmp_path / "bc"
    first = clone.run(c, str(work))
    for name in ("run_info.json", "labels.json", "metrics.jsonl", "policy/params.msgpack"):
        assert (work / name).exists(), name
    assert first["labels"]["train"]["tracked_agents"] > 0 and np.isfinite(first["final"]["loss"])
    assert [r["step"] for r in read_jsonl(work / "metrics.jsonl")] == [1, 2]
    assert sorted(os.listdir(work / "checkpoints")) == ["1", "2"]
    params = (work / "policy" / "params.msgpack").read_bytes()
    again = clone.run(c, str(work))
    assert again["final"] == {} and (work / "policy" / "params.msgpack").read_bytes() == params
    assert [r["step"] for r in read_jsonl(work / "metrics.jsonl")] == [1, 2]
