"""Data parallelism (cp_jax.parallel): runs sharded over 4 host devices, or over two processes
joined by jax.distributed, equal the single-device run of the same global batch. The multi-device
parts run in their own processes, because the device count is fixed when XLA starts
(XLA_FLAGS=--xla_force_host_platform_device_count=N). The trainer on 4 devices, killed and resumed
from its sharded checkpoint, and as two processes of 2 devices, is in tests/test_train.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import jax
import pytest

from cp_jax import parallel
from tests.support import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_on_four_devices(module: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(4))
    proc = subprocess.run([sys.executable, "-m", module], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_sharded_ppo_equals_single_device_run_on_four_devices():
    """One process with 4 devices makes the same PPO updates (LSTM policy; and with the bank in scene
    groups) as one device. Two processes x 2 devices (jax.distributed) making the same updates as one
    process with 4: tests/test_train.py, through launch.train_anchor."""
    out = _run_on_four_devices("tests.multidevice.ppo_sharded")
    assert out["devices"] == 4 and out["env_shards"] == 4 and out["env_spec"] == "P('data',)"
    assert out["params_replicated"]
    assert out["max_param_diff"] < 1e-4
    assert out["same_env_state"] and out["same_steps"]
    assert out["max_stat_diff"] < 1e-3
    assert "PPOConfig.num_envs (6)" in out["indivisible_error"]
    # The bank split in 4 groups of scenes, one per device: each env draws from its own group, each
    # device holds one group, nothing bank-sized is gathered, and the run equals one device's.
    grouped = out["groups"]
    assert grouped["start_x"] == [10.0, 10.0, 30.0, 30.0, 50.0, 50.0, 70.0, 70.0]
    assert grouped["bank_shard_shapes"] == [[1, 1]] and grouped["bank_spec"] == "P('data',)"
    assert grouped["max_param_diff"] < 1e-4 and grouped["same_env_state"]
    # Every all-gather is one of observe's [B, A, A] top-k distances (and at least one is found, so the
    # pattern still reads the compiled text).
    assert grouped["all_gather_sizes"] and set(grouped["all_gather_sizes"]) == {8 * 4 * 4}
    assert len(grouped["all_gather_sizes"]) == grouped["all_gathers"]


def test_sharded_counterplay_rounds_equal_single_device_rounds():
    g = _run_on_four_devices("tests.multidevice.counterplay_sharded")
    # bank_groups=4: one group of 9 scenes on each device, read where it lies; records and failures split
    assert g["max_param_diff"] < 1e-5 and g["same_diag"] and g["same_steps"] and g["params_replicated"]
    assert sum(g["repaired"]) > 0  # the rounds did repair something
    assert g["bank_shards"] == [[1] + g["bank_leaf_shape"][1:]] and g["bank_leaf_shape"][:2] == [4, 9]
    assert g["collectives"] > 0 and g["bank_collectives"] == []  # gradients reduced, the bank never gathered


def test_mesh_and_initialize_arguments_are_checked():
    mesh = parallel.make_mesh()
    assert parallel.size(mesh) == len(jax.devices()) and parallel.size(None) == 1
    with pytest.raises(ValueError, match="devices=99"):
        parallel.make_mesh(99)
    with pytest.raises(ValueError, match="num_processes"):
        parallel.initialize("localhost:1234", num_processes=2, process_id=5)
    assert parallel.initialize() is False  # no coordinator anywhere: a single-process run
