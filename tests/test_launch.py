"""The quickstart (the simulator with non-learned controllers) and a saved policy's self-play evaluation."""

import json
import os
import subprocess
import sys

import pytest

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


def test_quickstart_config_is_checked_before_any_work():
    from cp_jax.jobs import quickstart
    from experiments import quickstart as experiment

    for field, value, message in [("controllers", ("teleport",), "config.controllers"),
                                  ("style", "sporty", "unknown style")]:
        c = experiment.get_config()
        c[field] = value
        with pytest.raises(ValueError, match=message):
            quickstart.resolve(c)
    c = experiment.get_config()
    c.sim.obs_road = 0
    with pytest.raises(ValueError, match="obs_road"):
        quickstart.resolve(c)


def test_evaluate_policy_reports_rates_per_style(tmp_path):
    from cp_jax.jobs.evaluate_policy import evaluate_policy

    out = evaluate_policy("assets/anchors/ppo_small", ("normal", "aggressive"), scenes=1, agents=3,
                          cache_dir=str(tmp_path))
    assert set(out) == {"normal", "aggressive"}
    for rates in out.values():
        assert abs(sum(rates[k] for k in ("goal", "collision", "offroad", "timeout")) - 1.0) < 1e-3
        assert rates["agents"] >= 1 and 0.0 <= rates["at_fault"] <= rates["collision"] + 1e-9
    with pytest.raises(ValueError, match="unknown style"):
        evaluate_policy("assets/anchors/ppo_small", ("sporty",), scenes=1, cache_dir=str(tmp_path))
