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
from tests.support import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--config.scenes.train=2", "--config.scenes.eval=0", "--config.scenes.agents=3",
    "--config.sim.max_agents=8", "--config.sim.max_road_segments=2048", "--config.sim.obs_road=16",
    "--config.ppo.num_envs=2", "--config.ppo.rollout_steps=15", "--config.ppo.num_minibatches=2",
    "--config.train.total_updates=8", "--config.train.ckpt_every=2", "--config.train.log_every=1",
    "--config.train.keep=2", "--config.train.progress=False",
]


def _train(workdir, cache, kill_at=None, devices: int = 1, extra=(), process=None):
    """The command on `devices` host devices (per process with `process`)."""
    # os.environ carries the session's persistent compilation cache (tests/conftest.py): a resumed or
    # repeated run loads the programs its predecessor compiled.
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=xla_flags(devices))
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


def test_killed_run_resumes_exactly_and_two_hosts_read_their_own_scene_groups(tmp_path):
    """launch.train_anchor end to end, the bank in 4 scene groups:
    - r, one process on 4 devices: its outputs, the last train.keep checkpoints;
    - k, the same run SIGKILLed after update 3 and resumed from its sharded checkpoint: byte-identical
      parameters and identical metric lines (the lost update re-made, not duplicated); resuming with
      other scene groups is refused before anything is touched;
    - m, two processes of 2 devices each (jax.distributed on localhost, gloo collectives): each builds
      and holds only the two groups of its own devices, process 0 alone writes logs and the policy,
      orbax writes the checkpoints once, and the metrics equal r's;
    - a fine-tune of r (init_from, held-out evaluation on): its eval.json records the lineage."""
    from tests.test_parallel import _free_port

    cache, r, k, m = tmp_path / "cache", tmp_path / "r", tmp_path / "k", tmp_path / "m"
    extra = ["--config.ppo.bank_groups=4", "--config.ppo.num_envs=4", "--config.scenes.train=4",
             "--config.train.total_updates=4"]
    run = _train(r, cache, devices=4, extra=extra)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("run_info.json", "metrics.jsonl", "policy/params.msgpack", "policy/net_config.json", "curve.png"):
        assert (r / name).exists(), name
    assert sorted(os.listdir(r / "checkpoints")) == ["2", "4"]  # keep=2
    assert json.loads((r / "run_info.json").read_text())["config"]["ppo"]["num_envs"] == 4

    killed = _train(k, cache, kill_at=3, devices=4, extra=extra)  # the checkpoint of update 2 survives
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (k / "policy" / "params.msgpack").exists()
    assert len(read_jsonl(k / "metrics.jsonl")) == 3  # update 3 was logged before the kill
    c = anchor_config(cache, total_updates=4, devices=1)  # other scene groups: refused, nothing touched
    before = (k / "run_info.json").read_text()
    with pytest.raises(ValueError, match=r"config.ppo.bank_groups: 4 in the run, 1 now"):
        train.train(c, str(k))
    assert (k / "run_info.json").read_text() == before
    resumed = _train(k, cache, devices=4, extra=extra)
    assert resumed.returncode == 0 and "resumed from update 2" in resumed.stderr, resumed.stderr[-3000:]
    assert (r / "policy" / "params.msgpack").read_bytes() == (k / "policy" / "params.msgpack").read_bytes()
    assert _metrics(r) == _metrics(k)

    port = _free_port()
    procs = [_train(m, cache, devices=2, extra=extra, process=(i, port)) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "2 training scenes (this process's of 4 groups)" in err
    assert len([d for d in os.listdir(cache) if d.startswith("procedural_")]) == 4  # a cache per group
    assert sorted(os.listdir(m / "checkpoints")) == ["2", "4"]
    assert (m / "policy" / "params.msgpack").exists()
    two = _metrics(m)
    assert [row["step"] for row in two] == [1, 2, 3, 4]  # one line per update: only process 0 logs
    for ra, rb in zip(_metrics(r), two, strict=True):
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=1e-3, abs=1e-4), (ra["step"], key)

    c = anchor_config(cache, total_updates=1)  # a fine-tune of r, in-process on one device
    c.init_from, c.scenes.eval = str(r / "policy"), 1
    train.train(c, str(tmp_path / "c"))
    ev = json.loads((tmp_path / "c" / "eval.json").read_text())
    assert [x["run"] for x in ev["lineage"]] == [str(tmp_path / "c"), str(r)]
    assert f"--workdir={r}" in ev["lineage"][1]["command"] and ev["agent_steps"] > 0
    assert ev["lineage_agent_steps"] == ev["agent_steps"]  # run r kept no eval.json: its steps are unknown (0)


def anchor_config(cache, **train):
    """experiments/anchor_small.py with TINY's settings, in-process."""
    from experiments import anchor_small

    c = anchor_small.get_config()
    for arg in TINY:
        key, value = arg.removeprefix("--config.").split("=")
        section, field = key.split(".")
        c[section][field] = type(c[section][field])(value) if value not in ("True", "False") else value == "True"
    c.scenes.cache_dir = str(cache)
    c.train.update(train)
    return c


def test_bad_config_fails_before_any_work(tmp_path):
    """Checked in-process, before anything is generated or written; the command line says the same."""
    from experiments import anchor_small

    work = tmp_path / "w"
    for section, field, value in [("ppo", "sample_capacity", 0.0), ("shaping", "comfort_scale", -1.0),
                                  ("scenes", "eval_seed", 50), ("train", "keep", 0), ("net", "preset", "huge")]:
        c = anchor_small.get_config()
        c.scenes.cache_dir = str(tmp_path / "cache")
        c[section][field] = value
        with pytest.raises(ValueError, match=field):
            train.train(c, str(work))
    assert not work.exists() and not (tmp_path / "cache").exists()  # nothing generated or written
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "launch.train_anchor", f"--workdir={work}",
                        "--config.ppo.sample_capacity=0.0"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "sample_capacity" in r.stderr and not work.exists()


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


def test_procedural_bank_without_a_cache_equals_the_cached_one(tmp_path):
    """cache_dir "": the bank is built in memory (no TFDS), leaf for leaf what the scenario cache stores and
    reads back, names and order included (a scene group's slice, with its layout kinds, as training reads it)."""
    import jax
    import numpy as np

    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.sim import types

    sim = types.SimConfig(max_agents=8, max_road_segments=2048, obs_road=16, enable_idm=False)
    args = (3, 702, 4, sim)
    kw = dict(first=2, kinds=("highway", "four_way"))
    names, bank = bank_lib.cached_procedural_bank("", *args, **kw)
    cached_names, cached = bank_lib.cached_procedural_bank(str(tmp_path), *args, **kw)
    assert names == cached_names == ["highway_702", "four_way_703", "highway_704"]
    assert any(tmp_path.glob("procedural_*"))  # the cached call did write (and read back) a cache
    for a, b in zip(jax.tree.leaves(bank), jax.tree.leaves(cached), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


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


def test_resume_under_another_config_is_refused_and_a_diverged_run_is_not_checkpointed(tmp_path, monkeypatch):
    """A folder with checkpoints resumes only under its own config: a changed learning rate or update count is
    refused naming each field, before run_info.json is touched; a changed progress / log setting is a note.
    A step whose parameters become non-finite stops the run with Diverged: no checkpoint of it or after it,
    the last good one kept, no policy written."""
    import jax
    import jax.numpy as jnp

    from cp_jax.jobs import loop
    from cp_jax.rl import ppo

    work, cache = tmp_path / "w", tmp_path / "cache"
    train.train(anchor_config(cache, total_updates=2), str(work))
    info = (work / "run_info.json").read_text()
    c = anchor_config(cache, total_updates=4)
    c.ppo.lr = 5e-4
    with pytest.raises(ValueError, match=r"config.ppo.lr: 0.001 in the run, 0.0005 now; config.train.total_updates: "
                                         r"2 in the run, 4 now\); resume it with the same settings"):
        train.train(c, str(work))
    assert (work / "run_info.json").read_text() == info and sorted(os.listdir(work / "checkpoints")) == ["2"]
    loop.check_resume(str(work), anchor_config(cache, total_updates=2, log_every=5))  # safe: no error

    make_update = ppo.make_update

    def poisoned(*args, **kw):  # from update 3 on, the parameters are NaN (a diverged step)
        update = make_update(*args, **kw)

        def step(runner, *a):
            runner, stats = update(runner, *a)
            bad = jax.tree.map(lambda x: jnp.where(runner.update >= 3, jnp.nan, x), runner.params)
            return runner.replace(params=bad), stats
        return step

    monkeypatch.setattr(ppo, "make_update", poisoned)
    fresh = tmp_path / "d"
    with pytest.raises(loop.Diverged, match=r"update 4: non-finite .*parameters .* keeps update 2, the last good one"):
        train.train(anchor_config(cache, total_updates=6), str(fresh))
    assert sorted(os.listdir(fresh / "checkpoints")) == ["2"] and not (fresh / "policy").exists()
