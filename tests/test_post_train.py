"""launch.post_train end to end on a tiny anchor: outputs, SIGKILL + resume == uninterrupted, baselines."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax
import pytest

from cp_jax.io.metrics import read_jsonl
from cp_jax.jobs import post_train
from cp_jax.jobs.loop import FAULT_ENV
from cp_jax.policy import networks, saved
from cp_jax.sim import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = types.SimConfig(max_agents=8, max_road_segments=2048, obs_road=16, obs_partners=7, enable_idm=False)
NET = dataclasses.replace(networks.small(), set_width=16, trunk=(32,))
TINY = [
    "--config.scenes.train=2", "--config.scenes.eval=1", "--config.scenes.agents=3",
    "--config.budget_steps=8000", "--config.eval.every=2",
    "--config.train.ckpt_every=2", "--config.train.log_every=1", "--config.train.keep=2",
    "--config.train.progress=False",
]
CP = ["--config.counterplay.num_envs=2", "--config.counterplay.max_failures=4", "--config.counterplay.distill_steps=2",
      "--config.counterplay.distill_batch=16", "--config.counterplay.reg_states=1", "--config.counterplay.gate_envs=2"]
PPO = ["--config.ppo.num_envs=2", "--config.ppo.rollout_steps=10", "--config.ppo.num_minibatches=2"]


@pytest.fixture(scope="module")
def anchor(tmp_path_factory):
    """A tiny random 'anchor' saved like a trained one (eval.json gives its training steps)."""
    folder = tmp_path_factory.mktemp("anchor")
    saved.save(str(folder), NET, networks.init_params(NET, SIM, jax.random.PRNGKey(0)), SIM)
    (folder / "eval.json").write_text(json.dumps({"agent_steps": 100_000.0}))
    return folder


def _run(experiment, workdir, anchor, cache, extra=(), kill_at=None):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop(FAULT_ENV, None)
    if kill_at is not None:
        env[FAULT_ENV] = str(kill_at)
    cmd = [sys.executable, "-m", "launch.post_train", f"--config=experiments/{experiment}.py", f"--workdir={workdir}",
           f"--config.anchor={anchor}", f"--config.scenes.cache_dir={cache}", *TINY, *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _metrics(workdir):
    return read_jsonl(os.path.join(workdir, "metrics.jsonl"))


@pytest.mark.slow
def test_killed_counterplay_run_resumes_to_the_same_result(tmp_path, anchor):
    """In two scene groups (bank_groups=2, one scene each: the grouped loading and placement path;
    tests/test_parallel.py checks that the groups stay on their devices)."""
    cache = tmp_path / "cache"
    a, b = tmp_path / "a", tmp_path / "b"
    cp = [*CP, "--config.counterplay.bank_groups=2", "--config.budget_steps=16000"]  # >= 4 rounds (the kill is at 3)
    r = _run("counterplay", a, anchor, cache, cp)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 training scenes (this process's of 2 groups)" in r.stderr
    for name in ("run_info.json", "metrics.jsonl", "eval.jsonl", "post_train.json", "diagnostics.png",
                 "policy/params.msgpack"):
        assert (a / name).exists(), name
    summary = json.loads((a / "post_train.json").read_text())
    rounds = summary["rounds"]
    rows = _metrics(a)
    # budget_stop "closest": the last round ends within half a (mean) round of the budget.
    assert rounds >= 4 and abs(summary["agent_steps"] - 16000) <= summary["agent_steps"] / rounds / 2 + 1
    assert len(rows) == rounds and rows[-1]["agent_steps"] == summary["agent_steps"]
    wanted = {"picked", "repaired", "root_back", "passed_aggressive", "verified_normal", "distilled_samples"}
    assert wanted <= set(rows[0])
    # The budget charges records, branches and re-runs: more than the recorded episodes alone.
    assert all(r["round_steps"] > 0 for r in rows)

    killed = _run("counterplay", b, anchor, cache, cp, kill_at=3)  # round 2's checkpoint survives
    assert killed.returncode == -9, killed.stderr[-3000:]
    other = _run("counterplay", b, anchor, cache, CP)  # ungrouped: its scene indices would mean other scenes
    assert other.returncode != 0 and "bank_groups=2" in other.stderr
    resumed = _run("counterplay", b, anchor, cache, cp)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (a / "policy" / "params.msgpack").read_bytes() == (b / "policy" / "params.msgpack").read_bytes()
    assert _metrics(a) == _metrics(b)
    assert read_jsonl(a / "eval.jsonl") == read_jsonl(b / "eval.jsonl")


@pytest.mark.slow
def test_ppo_continue_spends_the_same_budget_and_changes_the_policy(tmp_path, anchor):
    experiment = "ppo_continue"  # the distillation baselines share counterplay's loop (tests/test_counterplay.py)
    work = tmp_path / experiment
    r = _run(experiment, work, anchor, tmp_path / "cache", PPO)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((work / "post_train.json").read_text())
    assert summary["method"] == experiment and abs(summary["agent_steps"] - 8000) <= summary["agent_steps"] / 2
    before, after = saved.load(str(anchor)).params, saved.load(str(work / "policy")).params
    assert any(jax.tree.leaves(jax.tree.map(lambda x, y: bool((x != y).any()), before, after)))


@pytest.mark.parametrize("budget, rule, rounds", [
    (1000, "over", 4), (1000, "closest", 3), (1000, "under", 3),  # rounds of 300: stop at 900 or 1200
    (1100, "over", 4), (1100, "closest", 4), (1100, "under", 3),
    (1200, "under", 4), (200, "under", 1), (200, "closest", 1),  # the first round always runs
])
def test_keep_going_ends_each_method_where_its_rule_says(budget, rule, rounds):
    spent, done = 0.0, 0
    while post_train.keep_going(spent, done, budget, rule):
        spent, done = spent + 300.0, done + 1
    assert done == rounds


def test_bad_config_fails_before_any_work(tmp_path, anchor):
    r = _run("counterplay", tmp_path / "w", anchor, tmp_path / "cache", ["--config.counterplay.root_rule=latest"])
    assert r.returncode != 0 and "root_rule" in r.stderr
    r = _run("counterplay", tmp_path / "w", tmp_path / "missing", tmp_path / "cache")
    assert r.returncode != 0 and "net_config.json" in r.stderr
    r = _run("counterplay", tmp_path / "w", anchor, tmp_path / "cache", ["--config.method=ppo_forever"])
    assert r.returncode != 0 and "config.method" in r.stderr
    r = _run("counterplay", tmp_path / "w", anchor, tmp_path / "cache", ["--config.budget_stop=never"])
    assert r.returncode != 0 and "config.budget_stop" in r.stderr
    r = _run("ppo_rewind", tmp_path / "w", anchor, tmp_path / "cache", [*PPO, "--config.ppo.bank_groups=2"])
    assert r.returncode != 0 and "config.ppo.bank_groups: ppo_rewind" in r.stderr
    r = _run("counterplay", tmp_path / "w", anchor, tmp_path / "cache", [*CP, "--config.counterplay.bank_groups=2",
                                                                        "--config.scenes.train=3"])
    assert r.returncode != 0 and "must be a multiple of config.counterplay.bank_groups" in r.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "cache").exists()  # nothing generated or written
