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
TINY_SETTINGS = {"scenes.train": 2, "scenes.eval": 1, "scenes.agents": 3, "budget_steps": 8000, "eval.every": 2,
                 "train.ckpt_every": 2, "train.log_every": 1, "train.keep": 2, "train.progress": False}
TINY = [f"--config.{k}={v}" for k, v in TINY_SETTINGS.items()]
CP_SETTINGS = {"counterplay.num_envs": 2, "counterplay.max_failures": 4, "counterplay.distill_steps": 2,
               "counterplay.distill_batch": 16, "counterplay.reg_states": 1, "counterplay.gate_envs": 2}


@pytest.fixture(scope="module")
def anchor(tmp_path_factory):
    """A tiny random 'anchor' saved like a trained one (eval.json gives its training steps)."""
    folder = tmp_path_factory.mktemp("anchor")
    saved.save(str(folder), NET, networks.init_params(NET, SIM, jax.random.PRNGKey(0)), SIM)
    (folder / "eval.json").write_text(json.dumps({"agent_steps": 100_000.0}))
    return folder


def _run(experiment, workdir, anchor, cache, extra=(), kill_at=None):
    # os.environ carries the session's XLA settings and compilation cache (tests/conftest.py): the
    # command runs the programs an in-process run of the same config compiled.
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop(FAULT_ENV, None)
    if kill_at is not None:
        env[FAULT_ENV] = str(kill_at)
    cmd = [sys.executable, "-m", "launch.post_train", f"--config=experiments/{experiment}.py", f"--workdir={workdir}",
           f"--config.anchor={anchor}", f"--config.scenes.cache_dir={cache}", *TINY, *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _config(experiment, anchor, cache, **dotted):
    """The experiment's ConfigDict with the tiny settings of TINY and the dotted overrides, in-process."""
    import importlib

    c = importlib.import_module(f"experiments.{experiment}").get_config()
    c.anchor, c.scenes.cache_dir = str(anchor), str(cache)
    for key, value in {**TINY_SETTINGS, **dotted}.items():
        section, _, field = key.rpartition(".")
        (c[section] if section else c)[field] = value
    return c


def _metrics(workdir):
    return read_jsonl(os.path.join(workdir, "metrics.jsonl"))


def test_killed_counterplay_run_resumes_to_the_same_result(tmp_path, anchor):
    """In two scene groups (bank_groups=2, one scene each: the grouped loading and placement path;
    tests/test_parallel.py checks that the groups stay on their devices). The uninterrupted run and the
    resume run in-process; the killed run is the command line, SIGKILLed after round 3."""
    cache = tmp_path / "cache"
    a, b = tmp_path / "a", tmp_path / "b"
    # >= 4 rounds (the kill is at 3); the student gate is off here (in-process: tests/test_counterplay.py)
    settings = {**CP_SETTINGS, "counterplay.bank_groups": 2, "budget_steps": 16000,
                "counterplay.student_gate": False}
    post_train.post_train(_config("counterplay", anchor, cache, **settings), str(a))
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

    cli = [f"--config.{k}={v}" for k, v in settings.items()]
    killed = _run("counterplay", b, anchor, cache, cli, kill_at=3)  # round 2's checkpoint survives
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "2 training scenes (this process's of 2 groups)" in killed.stderr  # the job's own line shows ...
    assert "checkpoint_manager" not in killed.stderr  # ... orbax's records do not (cp_jax/io/console.py)
    assert not (b / "policy" / "params.msgpack").exists() and len(_metrics(b)) == 3
    with pytest.raises(ValueError, match="config.counterplay.bank_groups: 2 in the run, 1 now"):  # ungrouped: its
        # scene indices would mean other scenes (refused with every other changed field)
        post_train.post_train(_config("counterplay", anchor, cache), str(b))
    post_train.post_train(_config("counterplay", anchor, cache, **settings), str(b))  # resumes from round 2
    assert (a / "policy" / "params.msgpack").read_bytes() == (b / "policy" / "params.msgpack").read_bytes()
    assert _metrics(a) == _metrics(b)
    assert read_jsonl(a / "eval.jsonl") == read_jsonl(b / "eval.jsonl")


def test_ppo_continue_spends_the_same_budget_and_changes_the_policy(tmp_path, anchor):
    """In-process (the command line and validation run in the CounterPlay test above)."""
    experiment = "ppo_continue"  # the distillation baselines share counterplay's loop (tests/test_counterplay.py)
    work = tmp_path / experiment
    config = _config(experiment, anchor, tmp_path / "cache", **{
        "scenes.eval": 0, "budget_steps": 600, "ppo.num_envs": 2, "ppo.rollout_steps": 10, "ppo.num_minibatches": 2})
    post_train.post_train(config, str(work))
    summary = json.loads((work / "post_train.json").read_text())
    assert summary["method"] == experiment and abs(summary["agent_steps"] - 600) <= summary["agent_steps"] / 2
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
    """Every setting is checked (and the anchor read) before any scene is generated or file written."""
    work, cache = tmp_path / "w", tmp_path / "cache"
    bad = [("counterplay", anchor, {"counterplay.root_rule": "latest"}, "root_rule"),
           ("counterplay", tmp_path / "missing", {}, "net_config.json"),
           ("counterplay", anchor, {"method": "ppo_forever"}, "config.method"),
           ("counterplay", anchor, {"budget_stop": "never"}, "config.budget_stop"),
           ("counterplay", anchor, {"budget_steps": 0, "budget_frac": 1.5}, "config.budget_frac"),
           ("counterplay", anchor, {"budget_steps": -5}, "config.budget_steps must be >= 0"),  # was: budget_frac's
           ("ppo_rewind", anchor, {"ppo.bank_groups": 2}, "config.ppo.bank_groups: ppo_rewind"),
           ("counterplay", anchor, {"counterplay.bank_groups": 2, "scenes.train": 3},
            "must be a multiple of config.counterplay.bank_groups"),
           ("counterplay", anchor, {"counterplay.stlyes": ("normal",)}, r"config.counterplay: unknown field")]
    for experiment, folder, dotted, message in bad:
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            post_train.post_train(_config(experiment, folder, cache, **dotted), str(work))
    assert not work.exists() and not cache.exists()  # nothing generated or written
    # the command line reports the same error as one usage line (launch/cli.py) and exits with 2
    r = _run("counterplay", work, anchor, cache, ["--config.counterplay.root_rule=latest"])
    assert r.returncode == 2 and "root_rule" in r.stderr and not work.exists()
    assert r.stderr.strip().splitlines() == ["launch.post_train: error: config.counterplay.root_rule: unknown "
                                             "'latest'; use value|fixed|none"]
