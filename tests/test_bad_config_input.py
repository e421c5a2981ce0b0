"""Issue #33, bad input: every probe is answered with one clear error naming the flag, field or file and
what it accepts, and nothing is silently accepted. Command-line usage errors are one line on stderr with
exit code 2 (launch/cli.py). The other rows' tests: a damaged params.msgpack (tests/test_saved_policy.py),
SimParams values (tests/test_env.py), config.budget_steps in-process (tests/test_post_train.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import ml_collections
import numpy as np
import pytest

from cp_jax.bench import suite
from cp_jax.policy import saved
from launch import cli

ROOT = Path(__file__).resolve().parents[1]

# name: (launcher, arguments (=W: a folder the command must not create), what its one line names)
PROBES = {
    "negative_budget": ("post_train", ["--workdir=W", "--config.budget_steps=-5"],
                        ["config.budget_steps must be >= 0", "got -5"]),  # was: ignored, the default budget ran
    "unknown_config_field": ("post_train", ["--workdir=W", "--config.nonexistent=1"],
                             ["--config.nonexistent", "no field 'nonexistent'", "budget_steps"]),
    "unknown_field_of_a_given_file": ("post_train", ["--config=experiments/ppo_continue.py", "--workdir=W",
                                                     "--config.ppo.lrr=1"],
                                      ["--config.ppo.lrr", "config.ppo has no field 'lrr'", "lr, "]),
    "badly_typed_field": ("post_train", ["--workdir=W", "--config.budget_steps=abc"],
                          ["--config.budget_steps=abc", "takes int values"]),
    "missing_config_file": ("post_train", ["--workdir=W", "--config=nofile.py"], ["--config=nofile.py: no such file"]),
    "missing_required_flag": ("post_train", ["--config.budget_steps=5"], ["--workdir: required"]),
    "unknown_flag": ("post_train", ["--workdir=W", "--foo=1"], ["--foo: unknown flag", "--workdir"]),
    "stray_argument": ("make_splits", ["--out=W", "extra"], ["unexpected arguments ['extra']"]),
    "enum_flag": ("build_scenes", ["--out=W", "--format=foo"], ["--format=foo", "gpudrive_json|tfexample"]),
    "job_validation": ("results", ["--out=W", "--config.bench.scenes=nowhere"],  # was: a 50-line flag dump
                       ["config.bench.scenes: 'nowhere'", "procedural"]),
    "malformed_flag_value": ("render_scenes", ["--out=W", "--seeds=a"], ["--seeds=a", "START:STOP"]),
}


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """{probe: (exit code, stdout, stderr, W)}: every probe's command, four at a time."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))

    def one(name):
        launcher, args, _ = PROBES[name]
        work = tmp_path_factory.mktemp(name) / "w"
        cmd = [sys.executable, "-m", f"launch.{launcher}", *(a.replace("=W", f"={work}") for a in args)]
        try:
            r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired as e:  # it took the input and started working
            return None, str(e.stdout or ""), f"{e}\n{e.stderr or ''}", work
        return r.returncode, r.stdout, r.stderr, work

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(PROBES, pool.map(one, PROBES), strict=True))


@pytest.mark.parametrize("name", list(PROBES))
def test_bad_command_line_is_one_usage_line_with_exit_code_2(answers, name):
    code, stdout, stderr, work = answers[name]
    launcher, _, named = PROBES[name]
    lines = stderr.strip().splitlines()
    assert code == cli.EXIT_USAGE and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith(f"launch.{launcher}: error: ")
    for text in named:
        assert text in lines[0], lines[0]
    assert not stdout.strip() and not work.exists()


LAUNCHERS = sorted(p.stem for p in (ROOT / "launch").glob("*.py") if '\nif __name__ == "__main__":' in p.read_text())


@pytest.mark.parametrize("name", LAUNCHERS)
def test_every_launcher_runs_through_cli(name):
    """absl's own app.run prints the module's flag list on a UsageError and a traceback on a bad override."""
    text = (ROOT / "launch" / f"{name}.py").read_text()
    assert "cli.run(main" in text and "app.run(" not in text and "DEFINE_config_file(" not in text


def test_override_error_names_the_field_and_its_section_fields():
    config = ml_collections.ConfigDict(dict(seed=0, ppo=dict(lr=1e-3, gamma=0.99)))
    assert cli.override_error(config, ["prog", "--config.ppo.lr=0.1", "--config.seed", "3"]) is None
    assert cli.override_error(config, ["prog", "--config.ppo.lrr=0.1"]) == (
        "--config.ppo.lrr: config.ppo has no field 'lrr'; its fields: gamma, lr")
    assert "config.seed is a value" in cli.override_error(config, ["prog", "--config.seed.x=1"])
    assert cli.override_error(config, ["prog", "--noconfig.ppo.nesterov"]).startswith("--noconfig.ppo.nesterov: ")
    wrapped = ("flag --config=x.py: Error whilst parsing config file:\n\nTraceback (most recent call last):\n"
               "  ...\nValueError: bad")
    assert cli.one_line(wrapped) == "flag --config=x.py: Error whilst parsing config file: ValueError: bad"


def test_procedural_set_does_not_depend_on_the_policy_scene_fields():
    """A policy saved with max_agents=8 made the benchmark build its procedural scenes with 8 slots (the
    generator dropped objects: other scenes, collisions 0% -> 50%). The set is now built with its own
    SimConfig; the policy's observation fields are kept, its others are named in the splits' warning."""
    anchor = saved.load(str(ROOT / "assets/anchors/conditioned_small")).sim
    ref = suite.procedural_suite(2, 4, anchor, cache_dir="")
    other = suite.procedural_suite(2, 4, dataclasses.replace(anchor, max_agents=8, episode_steps=60), cache_dir="")
    assert other.cfg.max_agents == 16 and other.cfg == ref.cfg and other.names == ref.names
    jax.tree.map(np.testing.assert_array_equal, other.bank, ref.bank)
    for name in suite.SPLITS:
        np.testing.assert_array_equal(other.splits[name].scene, ref.splits[name].scene)
        np.testing.assert_array_equal(other.splits[name].ego, ref.splits[name].ego)
        assert "max_agents=8" in other.splits[name].warning and "episode_steps=60" in other.splits[name].warning
        assert "max_agents" not in ref.splits[name].warning
    cfg, note = suite.procedural_config(dataclasses.replace(anchor, obs_road=128, grid_size=16, max_agents=32))
    assert (cfg.obs_road, cfg.grid_size, cfg.max_agents) == (128, 16, 16)
    assert "max_agents=32" in note and "obs_road" not in note and "grid_size" not in note
