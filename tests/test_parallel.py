"""Data parallelism (cp_jax.parallel): a run sharded over 4 host devices equals the single-device
run of the same global batch. The multi-device part runs in its own process, because the device
count is fixed when XLA starts (XLA_FLAGS=--xla_force_host_platform_device_count=4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest

from cp_jax import parallel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_on_four_devices(module: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-m", module], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_sharded_ppo_equals_single_device_run():
    out = _run_on_four_devices("tests.multidevice.ppo_sharded")
    assert out["devices"] == 4 and out["env_shards"] == 4 and out["env_spec"] == "P('data',)"
    assert out["params_replicated"]
    assert out["max_param_diff"] < 1e-4 and out["lstm_max_param_diff"] < 1e-4
    assert out["same_env_state"] and out["same_steps"]
    assert out["max_stat_diff"] < 1e-3
    assert "PPOConfig.num_envs (6)" in out["indivisible_error"]


def test_sharded_counterplay_rounds_equal_single_device_rounds():
    out = _run_on_four_devices("tests.multidevice.counterplay_sharded")
    assert out["repaired"] == [4.0, 4.0]  # the rounds did repair something
    assert out["max_param_diff"] < 1e-5 and out["same_diag"] and out["same_steps"]
    assert out["params_replicated"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_through_jax_distributed_equal_one_device():
    """Multi-host on one machine: two processes x 2 CPU devices joined by jax.distributed (gloo
    collectives) train the same parameters as one device with the same global batch."""
    port = str(_free_port())
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    procs = [subprocess.Popen([sys.executable, "-m", "tests.multidevice.ppo_multihost", str(i), port], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    hosts = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    single = subprocess.run([sys.executable, "-m", "tests.multidevice.ppo_multihost", "single"], cwd=ROOT,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=900)
    assert single.returncode == 0, single.stderr[-3000:]
    ref = json.loads(single.stdout.strip().splitlines()[-1])
    assert sorted(h["process"] for h in hosts) == [0, 1]
    for h in hosts:
        assert h["agent_steps"] == ref["agent_steps"] and h["goal_rate"] == pytest.approx(ref["goal_rate"])
        assert h["checksums"] == pytest.approx(ref["checksums"], rel=1e-4)


def test_mesh_and_initialize_arguments_are_checked():
    mesh = parallel.make_mesh()
    assert parallel.size(mesh) == len(jax.devices()) and parallel.size(None) == 1
    with pytest.raises(ValueError, match="devices=99"):
        parallel.make_mesh(99)
    with pytest.raises(ValueError, match="num_processes"):
        parallel.initialize("localhost:1234", num_processes=2, process_id=5)
    assert parallel.initialize() is False  # no coordinator anywhere: a single-process run


def test_trainer_on_four_devices_resumes_and_matches_one_device(tmp_path):
    """launch.train_anchor with its envs split over 4 devices, killed after update 2 and resumed from
    the sharded checkpoint, logs the same metrics as an uninterrupted one-device run."""
    from cp_jax.rl import trainer
    from tests.test_train import TINY, _metrics

    def train(workdir, devices: int, kill_at=None):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
        env.pop(trainer.FAULT_ENV, None)
        if kill_at is not None:
            env[trainer.FAULT_ENV] = str(kill_at)
        args = [a for a in TINY if "total_updates" not in a and "num_envs" not in a]
        cmd = [sys.executable, "-m", "launch.train_anchor", f"--workdir={workdir}",
               f"--config.scenes.cache_dir={tmp_path / 'cache'}", *args, "--config.train.total_updates=4",
               "--config.ppo.num_envs=4", f"--config.train.devices={devices}"]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    one = train(tmp_path / "one", 1)
    assert one.returncode == 0, one.stderr[-2000:]
    killed = train(tmp_path / "four", 4, kill_at=2)
    assert killed.returncode != 0
    resumed = train(tmp_path / "four", 4)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from update 2" in resumed.stderr
    a, b = _metrics(tmp_path / "one"), _metrics(tmp_path / "four")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        for k in ra:
            assert rb[k] == pytest.approx(ra[k], rel=1e-3, abs=1e-4), (ra["step"], k)
