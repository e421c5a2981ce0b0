"""The README's main job, end to end on a tiny config."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart_runs_and_writes_outputs(tmp_path):
    out = tmp_path / "qs"
    cmd = [sys.executable, "-m", "launch.quickstart", f"--out={out}", "--config.scenes=2",
           "--config.agents=6", "--config.controllers=('log','policy')"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["controllers"]) == {"log", "policy", "anchor"}  # the shipped anchor is evaluated too
    for rates in metrics["controllers"].values():
        total = sum(rates[k] for k in ("goal", "collision", "offroad", "timeout"))
        assert abs(total - 1.0) < 1e-5
    assert metrics["controllers"]["log"]["goal"] == 1.0  # goals are the final logged positions
    assert len(list(out.glob("*.png"))) == 2
    info = json.loads((out / "run_info.json").read_text())
    assert info["config"]["scenes"] == 2 and info["git_revision"]


def test_quickstart_rejects_unknown_controller(tmp_path):
    cmd = [sys.executable, "-m", "launch.quickstart", f"--out={tmp_path}", "--config.scenes=1",
           "--config.controllers=('teleport',)"]
    res = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode != 0 and "config.controllers" in res.stderr


def test_evaluate_policy_prints_rates(tmp_path):
    cmd = [sys.executable, "-m", "launch.evaluate_policy", "--policy=assets/anchors/ppo_small", "--scenes=1",
           "--agents=3", f"--cache_dir={tmp_path}", "--styles=normal,aggressive"]
    res = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for rates in out["styles"].values():
        assert abs(sum(rates[k] for k in ("goal", "collision", "offroad", "timeout")) - 1.0) < 1e-3
        assert rates["agents"] >= 1
