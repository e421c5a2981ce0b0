"""launch.train_anchor end to end: outputs, SIGKILL + resume == uninterrupted, same seed == same metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cp_jax.io.metrics import read_jsonl
from cp_jax.jobs import scenes, train
from cp_jax.jobs.loop import FAULT_ENV

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--config.scenes.train=2", "--config.scenes.eval=0", "--config.scenes.agents=3",
    "--config.sim.max_agents=8", "--config.sim.max_road_segments=2048", "--config.sim.obs_road=16",
    "--config.ppo.num_envs=2", "--config.ppo.rollout_steps=15", "--config.ppo.num_minibatches=2",
    "--config.train.total_updates=8", "--config.train.ckpt_every=2", "--config.train.log_every=1",
    "--config.train.keep=2", "--config.train.progress=False",
]


def _train(workdir, cache, kill_at=None, devices: int = 1, extra=(), process=None):
    # os.environ carries the session's persistent compilation cache (tests/conftest.py): a resumed or
    # repeated run loads the programs its predecessor compiled.
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env.pop(FAULT_ENV, None)
    if kill_at is not None:
        env[FAULT_ENV] = str(kill_at)
    cmd = [sys.executable, "-m", "launch.train_anchor", f"--workdir={workdir}",
           f"--config.scenes.cache_dir={cache}", *TINY, f"--config.train.devices={devices}", *extra]
    if process is not None:  # (process id, coordinator port): one of two processes joined by jax.distributed
        env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
        cmd += [f"--coordinator=localhost:{process[1]}", "--num_processes=2", f"--process_id={process[0]}",
                "--config.train.devices=0"]
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _metrics(workdir):
    rows = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
    return [{k: v for k, v in r.items() if k != "agent_steps_per_s"} for r in rows]  # wall-clock aside


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_result(tmp_path):
    """Run b (same seed as a, SIGKILLed after update 5 and resumed) ends with byte-identical parameters
    and identical metric lines: a second run with the same seed gives the same result, across
    processes and a kill (test_ppo.py checks the same in-process, and that another seed differs)."""
    cache = tmp_path / "cache"
    a, b = tmp_path / "a", tmp_path / "b"
    r = _train(a, cache)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("run_info.json", "metrics.jsonl", "policy/params.msgpack", "policy/net_config.json", "curve.png"):
        assert (a / name).exists(), name
    assert sorted(os.listdir(a / "checkpoints")) == ["6", "8"]  # keep=2
    assert json.loads((a / "run_info.json").read_text())["config"]["ppo"]["num_envs"] == 2

    killed = _train(b, cache, kill_at=5)  # SIGKILL after update 5: the checkpoint of update 4 survives
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (b / "policy" / "params.msgpack").exists()
    assert len(read_jsonl(b / "metrics.jsonl")) == 5  # update 5 was logged before the kill
    resumed = _train(b, cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (a / "policy" / "params.msgpack").read_bytes() == (b / "policy" / "params.msgpack").read_bytes()
    assert _metrics(a) == _metrics(b)  # the lost update 5 was re-made, not duplicated
    # A fine-tune of run a (init_from, held-out evaluation on): its eval.json records the lineage.
    c = tmp_path / "c"
    tuned = _train(c, cache, extra=[f"--config.init_from={a / 'policy'}", "--config.scenes.eval=1",
                                    "--config.train.total_updates=1", "--config.train.ckpt_every=1"])
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    ev = json.loads((c / "eval.json").read_text())
    assert [r["run"] for r in ev["lineage"]] == [str(c), str(a)]
    assert f"--workdir={a}" in ev["lineage"][1]["command"] and ev["agent_steps"] > 0
    assert ev["lineage_agent_steps"] == ev["agent_steps"]  # run a kept no eval.json: its steps are unknown (0)
    # A 2-device run killed and resumed from its sharded checkpoint: the next test's reference run.


@pytest.mark.slow
def test_two_process_launch_reads_its_own_scene_group_and_writes_files_once(tmp_path):
    """launch.train_anchor as two processes (one device each, jax.distributed on localhost) with the
    bank in 2 scene groups: each process builds and holds only its own group, process 0 alone writes
    logs and the policy, orbax writes the checkpoints once, and the metrics equal one process with
    2 devices and the same groups (killed and resumed; resuming with other groups is refused)."""
    from tests.test_parallel import _free_port

    cache, extra = tmp_path / "cache", ["--config.ppo.bank_groups=2", "--config.train.total_updates=4"]
    port = _free_port()
    procs = [_train(tmp_path / "m", cache, extra=extra, process=(i, port)) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "1 training scenes (this process's of 2 groups)" in err
    assert len([d for d in os.listdir(cache) if d.startswith("procedural_")]) == 2  # a cache per group
    assert sorted(os.listdir(tmp_path / "m" / "checkpoints")) == ["2", "4"]
    assert (tmp_path / "m" / "policy" / "params.msgpack").exists()
    # The reference: one process on 2 devices, same groups, SIGKILLed after update 3 and resumed.
    assert _train(tmp_path / "r", cache, kill_at=3, devices=2, extra=extra).returncode == -9
    one = _train(tmp_path / "r", cache, devices=2, extra=extra)
    assert one.returncode == 0 and "resumed from update 2" in one.stderr, one.stderr[-3000:]
    changed = _train(tmp_path / "r", cache, devices=2, extra=["--config.train.total_updates=6"])
    assert changed.returncode != 0 and "config.ppo.bank_groups (1)" in changed.stderr  # other groups: refused
    two = _metrics(tmp_path / "m")
    assert [r["step"] for r in two] == [1, 2, 3, 4]  # one line per update: only process 0 logs
    for ra, rb in zip(_metrics(tmp_path / "r"), two, strict=True):
        for k in ra:
            assert rb[k] == pytest.approx(ra[k], rel=1e-3, abs=1e-4), (ra["step"], k)


def test_bad_config_fails_before_any_work(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "launch.train_anchor", f"--workdir={tmp_path / 'w'}",
                        "--config.ppo.sample_capacity=0.0"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "sample_capacity" in r.stderr
    assert not (tmp_path / "w").exists()  # nothing generated or written


def test_human_regularisation_settings_are_validated():
    from experiments import anchor_small

    c = anchor_small.get_config()
    c.ppo.bc_coef = 0.1
    assert train.resolve(c).ppo.bc_coef == 0.1
    c.human.batch = 0
    with pytest.raises(ValueError, match="config.human.batch"):
        train.resolve(c)
    c = anchor_small.get_config()
    c.ppo.bc_coef, c.ppo.bank_groups, c.ppo.num_envs = 0.1, 2, 32
    with pytest.raises(ValueError, match="config.ppo.bc_coef"):
        train.resolve(c)


def test_real_scene_cache_joins_the_training_bank(tmp_path):
    """config.scenes.real: a cache built with the training's stored sizes but a longer road list per cell
    (launch.build_scenes' obs_road 128) joins the bank after the procedural scenes, its road lists cut to
    the training obs_road (the nearest-first head: the same lists as a build with that obs_road); a cache
    with other stored sizes is refused naming the setting and the field."""
    import dataclasses

    import ml_collections
    import numpy as np

    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.sim import types

    sim = types.SimConfig(max_agents=8, max_road_segments=2048, obs_road=16, enable_idm=False)
    built = dataclasses.replace(sim, obs_road=128, enable_idm=True)  # what build_scenes labels a cache with
    bank_lib.cached_procedural_bank(str(tmp_path), 2, 700, 3, built)
    real = next(p for p in tmp_path.iterdir() if p.name.startswith("procedural_700"))
    sc = ml_collections.ConfigDict(dict(train=2, train_seed=0, eval=0, eval_seed=100_000, agents=3,
                                        cache_dir=str(tmp_path), real=str(real)))
    bank, _, names = scenes.load(sc, sim)
    assert sorted(names[2:]) == ["four_way_700", "t_junction_701"] and bank.cell_road.shape == (4, 32 * 32, 16)
    same_names, same = bank_lib.cached_procedural_bank(str(tmp_path), 2, 700, 3, sim)  # built with obs_road 16
    order = [same_names.index(n) for n in names[2:]]
    np.testing.assert_array_equal(np.asarray(bank.cell_road[2:]), np.asarray(same.cell_road)[order])
    np.testing.assert_array_equal(np.asarray(bank.log_xy[2:]), np.asarray(same.log_xy)[order])
    grouped, _, group_names = scenes.load(sc, sim, groups=[1], num_groups=2)  # one scene group
    assert group_names == [names[1], names[3]] and grouped.cell_road.shape[:2] == (1, 2)
    with pytest.raises(ValueError, match=r"config.scenes.real=.*max_agents=8, this run needs max_agents=16"):
        scenes.load(sc, dataclasses.replace(sim, max_agents=16))
