"""Issue #33, bad input: every probe is answered with one clear error naming the flag, field or file and
what it accepts, and nothing is silently accepted. Command-line usage errors are one line on stderr with
exit code 2 (launch/cli.py). The other rows' tests: a damaged params.msgpack (tests/test_saved_policy.py),
SimParams values (tests/test_env.py), config.budget_steps in-process (tests/test_post_train.py)."""

from __future__ import annotations

import dataclasses
import json
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
    # was: a traceback; and --process_id beyond --num_processes silently a single-process run
    "num_processes_zero": ("train_anchor", ["--workdir=W", "--coordinator=localhost:1234", "--num_processes=0"],
                           ["--num_processes=0: must be >= 1"]),
    "process_id_out_of_range": ("train_anchor", ["--workdir=W", "--num_processes=2", "--process_id=5"],
                                ["--process_id=5", "[0, 2)"]),
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


# --- Run folders, checkpoints, saved policies, exports and the quickstart's --out (issue #33, second part) ---

def _tiny_config(**fields):
    return ml_collections.ConfigDict(dict(seed=0, ppo=dict(lr=1e-3), train=dict(progress=True), **fields))


def _copy_policy(dest: Path, drop: str = "") -> str:
    """A copy of the shipped anchor's policy files in dest (without `drop`)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in saved.FILES:
        if name != drop:
            (dest / name).write_bytes((ROOT / "assets/anchors/conditioned_small" / name).read_bytes())
    return str(dest)


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_workdir_that_is_not_this_run_is_refused_before_anything_is_written(tmp_path):
    """A --workdir holding an exported policy (run_info.json, metrics.jsonl beside params.msgpack) but no checkpoint
    was trained into, its files overwritten; checkpoints without run_info.json were resumed under any config; a
    damaged run_info.json was a bare JSON error. Each is now refused naming the folder or file, nothing touched."""
    from cp_jax.jobs import loop

    config = _tiny_config()
    info = json.dumps(dict(config=config.to_dict(), argv=["train_anchor.py"]))
    (tmp_path / "file").write_text("x")
    export = tmp_path / "export"
    _copy_policy(export)
    (export / "run_info.json").write_text(info)
    (export / "metrics.jsonl").write_text('{"step": 1}\n')
    logs = tmp_path / "logs"  # metrics of some run, no run_info.json
    logs.mkdir()
    (logs / "metrics.jsonl").write_text('{"step": 1}\n')
    noinfo, badinfo, noconfig = (tmp_path / n for n in ("noinfo", "badinfo", "noconfig"))
    for folder in (noinfo, badinfo, noconfig):
        (folder / "checkpoints" / "2").mkdir(parents=True)
    (badinfo / "run_info.json").write_text('{"config": ')
    (noconfig / "run_info.json").write_text('{"argv": []}')
    cases = [(tmp_path / "file", "a file, not a run folder"),
             (export, r"holds files that are not a run's \(net_config.json, params.msgpack, sim_config.json\)"),
             (logs, "holds files of a run .* but no run_info.json"),
             (noinfo, r"holds checkpoints \(steps 2\) but no run_info.json"),
             (badinfo, str(badinfo / "run_info.json") + ": unreadable"),
             (noconfig, str(noconfig / "run_info.json") + ": holds no 'config' section")]
    before = _listing(tmp_path)
    for folder, message in cases:
        with pytest.raises(ValueError, match=message):
            loop.check_resume(str(folder), config)
    with pytest.raises(ValueError, match="holds files that are not a run's"):
        loop.Run(str(export), config, keep=1)
    assert _listing(tmp_path) == before
    # The start of the same run, stopped before its first checkpoint: started again; under another config: refused.
    start = tmp_path / "start"
    (start / "checkpoints").mkdir(parents=True)
    (start / "run_info.json").write_text(info)
    (start / "metrics.jsonl").write_text("")
    loop.check_resume(str(start), _tiny_config())
    (start / "run_info.json.tmp").write_text('{"conf')  # writes a kill interrupted: still the same run's start
    (start / "metrics.jsonl.tmp").write_text("")
    loop.check_resume(str(start), _tiny_config())
    with pytest.raises(ValueError, match=r"the start of a run \(no checkpoint yet\) made with another config "
                                         r"\(config.ppo.lr: 0.001 in the run, 0.0005 now\)"):
        loop.check_resume(str(start), ml_collections.ConfigDict(dict(seed=0, ppo=dict(lr=5e-4),
                                                                     train=dict(progress=True))))
    loop.check_resume(str(tmp_path / "new"), config)  # a missing or empty folder: a fresh start
    (tmp_path / "empty").mkdir()
    loop.check_resume(str(tmp_path / "empty"), config)


def test_no_readable_checkpoint_is_one_line_naming_the_folder(tmp_path):
    """A damaged _METADATA (every step unreadable) was a RuntimeError with a long traceback; it is a ValueError
    naming the folder, whose message fits one line (launch/cli.py turns it into exit code 1)."""
    from cp_jax.io.checkpoints import Checkpointer

    tree = {"w": np.arange(3, dtype=np.float32)}
    with Checkpointer(tmp_path / "checkpoints") as ckpt:
        ckpt.save(2, tree)
    metadata = [p for p in (tmp_path / "checkpoints" / "2").rglob("_METADATA")]
    assert metadata
    for p in metadata:
        p.write_text("garbage")
    with Checkpointer(tmp_path / "checkpoints") as ckpt, pytest.raises(ValueError) as e:
        ckpt.restore(tree)
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'checkpoints'}: no readable checkpoint (steps [2]")
    assert "\n" not in message and len(message) < 600 and "new --workdir" in message


def test_saved_policy_with_non_finite_parameters_is_refused(tmp_path):
    """All-NaN parameters loaded and were evaluated (exit 0) or post-trained (a misleading 'diverged' later)."""
    good = saved.load(str(ROOT / "assets/anchors/conditioned_small"))
    bad = jax.tree.map(lambda x: np.where(np.arange(x.size).reshape(x.shape) == 0, np.inf, x), good.params)
    saved.save(str(tmp_path / "pol"), good.net.cfg, bad, good.sim)
    with pytest.raises(ValueError, match=str(tmp_path / "pol" / "params.msgpack") + r": non-finite parameters \("):
        saved.load(str(tmp_path / "pol"))


def test_training_refuses_a_bad_init_from_or_real_cache_before_the_run_folder(tmp_path):
    """config.init_from without sim_config.json, with another network or NaN parameters, and a config.scenes.real
    whose sim_config.json is damaged were met after Run() made the workdir (tracebacks); resolve() refuses them."""
    from cp_jax.jobs import train
    from experiments import anchor_small

    def config(**fields):
        c = anchor_small.get_config()
        c.scenes.cache_dir = str(tmp_path / "scenes")
        for k, v in fields.items():
            if k == "real":
                c.scenes.real = v
            else:
                c[k] = v
        return c

    assert train.resolve(config(init_from=str(ROOT / "assets/anchors/conditioned_small"))).start is not None
    nosim = _copy_policy(tmp_path / "nosim", drop="sim_config.json")
    good = saved.load(str(ROOT / "assets/anchors/conditioned_small"))
    saved.save(str(tmp_path / "nan"), good.net.cfg, jax.tree.map(lambda x: x * np.nan, good.params), good.sim)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "sim_config.json").write_text("{")
    cases = [(dict(init_from=nosim), rf"config.init_from='{nosim}': {nosim}/sim_config.json: missing"),
             (dict(init_from=str(ROOT / "assets/anchors/ppo_small")), "its network .* differs from config.net"),
             (dict(init_from=str(tmp_path / "nan")), "config.init_from=.*params.msgpack: non-finite parameters"),
             (dict(real=str(tmp_path / "cache")), rf"config.scenes.real='{tmp_path / 'cache'}': .*sim_config.json")]
    for fields, message in cases:
        with pytest.raises(ValueError, match=message):
            train.resolve(config(**fields))
    with pytest.raises(ValueError, match="config.init_from"):
        train.train(config(init_from=nosim), str(tmp_path / "work"))
    assert not (tmp_path / "work").exists()


def test_multi_host_settings_that_are_not_one_run_are_refused():
    """--num_processes=2 --process_id=5 (no coordinator) ran silently as a single process."""
    from cp_jax import parallel

    assert parallel.processes() == ("", 0, -1)
    assert parallel.processes("", 1) == ("", 1, 0)
    for args, message in [(("", 2, 5), r"--process_id=5 .* must be in \[0, 2\)"),
                          (("", 2, 1), "--num_processes=2 needs --coordinator"),
                          (("h:1", 0, 0), "--num_processes=0 .* must be >= 1"),
                          (("h:1", 2, -1), r"--process_id .* required"),
                          (("", 0, 3), "--process_id=3 .* needs --num_processes")]:
        with pytest.raises(ValueError, match=message):
            parallel.processes(*args)


def test_export_checks_run_info_and_out_before_staging(tmp_path):
    """A workdir without run_info.json (or a damaged one, or one without argv) left OUT.partial behind (a
    KeyError traceback); an --out that is a file was deleted without --overwrite."""
    from cp_jax.jobs.export_policy import export

    work = tmp_path / "work"
    _copy_policy(work / "policy")
    out = tmp_path / "out"
    for text, message in [(None, "run_info.json: missing"), ('{"argv": ', "run_info.json: unreadable"),
                          ("{}", "run_info.json: no 'argv'")]:
        if text is not None:
            (work / "run_info.json").write_text(text)
        with pytest.raises(ValueError, match=str(work) + "/" + message):
            export(str(work), str(out))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    (work / "run_info.json").write_text(json.dumps(dict(argv=["train_anchor.py", "--workdir=w"], git_revision="x")))
    out.write_text("precious")
    with pytest.raises(ValueError, match=f"--out={out}: a file, not a folder; pass --overwrite"):
        export(str(work), str(out))
    assert out.read_text() == "precious"
    export(str(work), str(out), overwrite=True)
    assert (out / "params.msgpack").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out", "work"]


def test_quickstart_checks_its_fields_anchor_and_out_before_any_work(tmp_path):
    """--config.scenes=0 / --config.agents=-1 were tracebacks, a missing anchor was silently skipped, a broken one
    failed after the episodes ran; an --out holding an earlier quickstart's PNGs was mixed with the new ones."""
    from cp_jax.jobs import quickstart
    from experiments import quickstart as experiment

    nosim = _copy_policy(tmp_path / "nosim", drop="sim_config.json")
    for field, value, message in [("scenes", 0, r"config.scenes must be an int >= 1 .*got 0"),
                                  ("agents", -1, r"config.agents must be an int >= 1 .*got -1"),
                                  ("anchor", str(tmp_path / "nope"), "config.anchor=.*nope': no such folder"),
                                  ("anchor", nosim, f"config.anchor='{nosim}': {nosim}/sim_config.json: missing")]:
        c = experiment.get_config()
        c[field] = value
        with pytest.raises(ValueError, match=message):
            quickstart.resolve(c)
    assert quickstart.resolve(experiment.get_config()).net.cfg.condition  # the shipped anchor, read
    c = experiment.get_config()
    c.anchor = ""
    assert quickstart.resolve(c) is None
    out = tmp_path / "qs"
    out.mkdir()
    (out / "scene_00_old.png").write_bytes(b"old")
    with pytest.raises(ValueError, match=f"--out={out} holds files .*scene_00_old.png.*pass --overwrite"):
        quickstart.run(c, str(out))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="a file, not a folder"):
        quickstart.check_out(str(tmp_path / "file"))
    quickstart.check_out(str(out), overwrite=True)
    assert _listing(out) == {"scene_00_old.png": b"old"} and not (tmp_path / "qs.partial").exists()
