"""launch.train_anchor end to end: outputs, SIGKILL + resume == uninterrupted, same seed == same metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cp_jax.io.metrics import read_jsonl
from cp_jax.rl import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--config.scenes.train=2", "--config.scenes.eval=0", "--config.scenes.agents=3",
    "--config.sim.max_agents=8", "--config.sim.max_road_segments=2048", "--config.sim.obs_road=16",
    "--config.ppo.num_envs=2", "--config.ppo.rollout_steps=15", "--config.ppo.num_minibatches=2",
    "--config.train.total_updates=8", "--config.train.ckpt_every=2", "--config.train.log_every=1",
    "--config.train.keep=2", "--config.train.progress=False",
]


def _train(workdir, cache, kill_at=None, devices: int = 1):
    # os.environ carries the session's persistent compilation cache (tests/conftest.py): a resumed or
    # repeated run loads the programs its predecessor compiled.
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env.pop(trainer.FAULT_ENV, None)
    if kill_at is not None:
        env[trainer.FAULT_ENV] = str(kill_at)
    cmd = [sys.executable, "-m", "launch.train_anchor", f"--workdir={workdir}",
           f"--config.scenes.cache_dir={cache}", *TINY, f"--config.train.devices={devices}"]
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

    # Data-parallel over 2 devices (the envs split), killed and resumed from the sharded checkpoint:
    # the same metrics as the one-device run up to float reduction order.
    d = tmp_path / "d"
    assert _train(d, cache, kill_at=5, devices=2).returncode == -9
    resumed = _train(d, cache, devices=2)
    assert resumed.returncode == 0 and "resumed from update 4" in resumed.stderr, resumed.stderr[-3000:]
    sharded = _metrics(d)
    assert [r["step"] for r in sharded] == [r["step"] for r in _metrics(a)]
    for ra, rd in zip(_metrics(a), sharded, strict=True):
        for k in ra:
            assert rd[k] == pytest.approx(ra[k], rel=1e-3, abs=1e-4), (ra["step"], k)


def test_bad_config_fails_before_any_work(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "launch.train_anchor", f"--workdir={tmp_path / 'w'}",
                        "--config.ppo.sample_capacity=0.0"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "sample_capacity" in r.stderr
    assert not (tmp_path / "w").exists()  # nothing generated or written
