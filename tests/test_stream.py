"""Scene sets at scale: launch.build_scenes in parallel shards (resumable), banks streamed from the cache
with grain (scenarios/stream.py), and training that refreshes its bank from the stream and resumes exactly."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from cp_jax.scenarios import bank as bank_lib
from cp_jax.scenarios import cache as cache_lib
from cp_jax.scenarios import stream as stream_lib
from cp_jax.sim import types
from tests.test_train import ROOT, _metrics, _train

SIM = types.SimConfig(max_agents=8, max_road_segments=2048, max_lanes=64, obs_road=16)
BUILD = ["--format=procedural", "--procedural_scenes=6", "--seed=500", "--agents=3", "--kinds=ALL", "--max_agents=8",
         "--max_road_segments=2048", "--max_lanes=64"]


def _build(out, *extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "launch.build_scenes", f"--out={out}", *BUILD, *extra], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Six procedural scenes (seeds 500..505, every kind in turn) in three shards by two workers."""
    out = tmp_path_factory.mktemp("stream") / "cache"
    res = _build(out, "--workers=2", "--shards=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "6 scenes converted, 0 skipped" in res.stdout and "(2 workers)" in res.stdout
    return out


def test_a_sharded_build_reads_as_one_cache_and_a_killed_build_redoes_only_its_unfinished_shards(built, tmp_path):
    cache = cache_lib.ScenarioCache(str(built))
    assert len(cache) == 6 and sorted(os.listdir(built / "shards")) == [f"0000{k}-of-00003" for k in range(3)]
    names = sorted(cache[i][0] for i in range(6))
    kinds = ("four_way", "t_junction", "merge", "roundabout", "multi_lane", "left_turn")
    assert names == sorted(f"procedural_{k}_{500 + i}" for i, k in enumerate(kinds))
    # the scenes are exactly the training bank's for the same seeds, kinds and agents
    want_names, want = bank_lib.cached_procedural_bank("", 6, 500, 3, SIM, kinds=("four_way", "t_junction", "merge",
                                                       "roundabout", "multi_lane", "left_turn", "narrow_passage",
                                                       "highway"))
    for i in range(6):
        name, scene = cache[i]
        j = want_names.index(name.removeprefix("procedural_"))
        got = cache_lib.bank_for(cache.cfg, scene, SIM, "test")
        for field, a in dataclasses.asdict(got).items():
            np.testing.assert_array_equal(np.asarray(a), np.asarray(getattr(want, field))[j], err_msg=field)
    report = json.loads((built / "report.json").read_text())
    assert report["summary"]["converted"] == 6 and report["summary"]["shards"] == 3 and len(report["scenes"]) == 6

    # A build killed after one shard: the finished shard is kept, an unfinished one redone, the result the same.
    part = tmp_path / "part"
    shutil.copytree(built, part)
    os.remove(part / "sim_config.json")
    os.remove(part / "shards" / "00001-of-00003" / "report.json")  # shard 1 was still being written
    shutil.rmtree(part / "shards" / "00002-of-00003")  # shard 2 not started
    kept = (part / "shards" / "00000-of-00003" / "report.json").stat().st_mtime_ns
    res = _build(part, "--workers=2", "--shards=3")
    assert res.returncode == 0 and "1 of 3 shards kept from an earlier run" in res.stderr, res.stderr[-3000:]
    assert (part / "shards" / "00000-of-00003" / "report.json").stat().st_mtime_ns == kept
    again = cache_lib.ScenarioCache(str(part))
    assert sorted(again[i][0] for i in range(6)) == names
    # other settings on a started build: refused before anything is touched
    os.remove(part / "sim_config.json")
    res = _build(part, "--workers=2", "--shards=2")
    assert res.returncode != 0 and "other settings (shards differ)" in res.stderr
    assert not (part / "sim_config.json").exists()


def test_banks_are_a_pure_function_of_the_seed_and_groups_read_disjoint_scenes(built):
    stream = stream_lib.BankStream(str(built), 4, 3, SIM)
    it = stream.iterator()
    first = [next(it) for _ in range(3)]
    assert it.get_state() == {"next_index": 3}
    epoch = first[0][0] + first[1][0][:2]  # the first six scenes of the stream: every scene once
    assert sorted(epoch) == sorted(stream.cache[i][0] for i in range(6))
    assert first[0][1].cell_road.shape[-1] == SIM.obs_road and first[0][1].goal.shape == (4, 8, 2)
    again = stream_lib.BankStream(str(built), 4, 3, SIM).iterator(start=2)  # resumed at bank 2: the same bank
    names, bank = next(again)
    assert names == first[2][0]
    jax.tree.map(np.testing.assert_array_equal, bank, first[2][1])
    assert stream[1][0] == first[1][0]  # random access == iteration
    assert stream_lib.BankStream(str(built), 4, 4, SIM)[0][0] != first[0][0]  # another seed, another order
    # Two scene groups (two devices or hosts): disjoint halves of each bank; one process with both = stacked.
    g0, g1 = (stream_lib.BankStream(str(built), 4, 3, SIM, groups=(g,), num_groups=2)[0] for g in (0, 1))
    both = stream_lib.BankStream(str(built), 4, 3, SIM, groups=(0, 1), num_groups=2)[0]
    assert not set(g0[0]) & set(g1[0]) and both[0] == g0[0] + g1[0] and both[1].goal.shape == (2, 2, 8, 2)
    with pytest.raises(ValueError, match=r"cache: built with max_agents=8, this run needs max_agents=16"):
        stream_lib.BankStream(str(built), 4, 3, dataclasses.replace(SIM, max_agents=16))
    with pytest.raises(ValueError, match="6 scenes, fewer than a bank of 8"):
        stream_lib.BankStream(str(built), 8, 3, SIM)


def test_a_streaming_run_killed_after_a_refresh_resumes_exactly(built, tmp_path):
    """Banks of 2 scenes, a new one every 2 updates: the run killed after update 5 resumes from its
    checkpoint of update 4 (bank 1, the refresh to bank 2 not yet made) to the same parameters and metrics."""
    cache = tmp_path / "proc"
    extra = [f"--config.scenes.stream={built}", "--config.scenes.refresh_every=2", "--config.train.total_updates=6"]
    r, k = tmp_path / "r", tmp_path / "k"
    run = _train(r, cache, extra=extra)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "streaming banks of 2 scenes" in run.stderr and "(6 scenes), a new bank every 2 updates" in run.stderr
    killed = _train(k, cache, kill_at=5, extra=extra)
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = _train(k, cache, extra=extra)
    assert resumed.returncode == 0 and "resumed from update 4" in resumed.stderr, resumed.stderr[-3000:]
    assert (r / "policy" / "params.msgpack").read_bytes() == (k / "policy" / "params.msgpack").read_bytes()
    assert _metrics(r) == _metrics(k)
    assert not any(cache.glob("procedural_*"))  # no procedural training bank was built (held-out: none)
    one = _train(tmp_path / "one", cache, extra=extra[:1] + ["--config.scenes.refresh_every=100", *extra[2:]])
    assert one.returncode == 0, one.stderr[-3000:]  # the same run on bank 0 throughout: the refreshes mattered
    params = "policy/params.msgpack"
    assert (r / params).read_bytes() != (tmp_path / "one" / params).read_bytes()
    assert _metrics(r)[:2] == _metrics(tmp_path / "one")[:2]  # (until the first refresh, the same updates)


def test_stream_settings_are_checked_before_any_work(built, tmp_path):
    from cp_jax.jobs import post_train, train
    from experiments import anchor_small, counterplay

    def config(**scenes):
        c = anchor_small.get_config()
        c.scenes.stream = str(built)
        c.scenes.update(scenes)
        return c

    assert train.resolve(config()).ppo  # a cache folder and the default refresh_every: accepted
    for scenes, match in [(dict(refresh_every=0), "config.scenes.refresh_every must be >= 1"),
                          (dict(kinds=("highway",)), "config.scenes.kinds applies to the procedural"),
                          (dict(stream=str(tmp_path)), "not a scenario cache")]:
        with pytest.raises(ValueError, match=match):
            train.resolve(config(**scenes))
    c = config()
    c.ppo.bc_coef = 0.1
    with pytest.raises(ValueError, match="no config.scenes.stream"):
        train.resolve(c)
    c = counterplay.get_config()
    c.scenes.stream = str(built)
    with pytest.raises(ValueError, match="config.scenes.stream: this job reads one fixed training bank"):
        post_train.post_train(c, str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()


def test_splits_mined_from_a_cache_score_as_from_the_scenes_and_serve_the_benchmark(built, tmp_path):
    """make_splits --format=cache reads a cache one scene at a time (builder.unbuild): the pairs and scores of
    the scenes it was built from, and manifests whose scene ids the benchmark finds in that cache."""
    from cp_jax.bench import suite
    from cp_jax.scenarios import splits
    from cp_jax.scenarios.builder import unbuild
    from cp_jax.scenarios.procedural import generator

    cache = cache_lib.ScenarioCache(str(built))
    for i in range(len(cache)):
        name, scene = cache[i]
        kind, seed = name.removeprefix("procedural_").rsplit("_", 1)
        raw = generator.generate(int(seed), kind, 3, max_objects=8, max_road_segments=2048)
        want = splits.score_scenes([raw], [name])
        got = splits.score_scenes([unbuild(scene, name)], [name])
        assert [(p.scene_id, p.ego) for p in got] == [(p.scene_id, p.ego) for p in want], name
        np.testing.assert_allclose([p.score for p in got], [p.score for p in want], atol=1e-4, err_msg=name)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-m", "launch.make_splits", "--format=cache", f"--src={built}", "--n=4",
                          f"--out={tmp_path / 'splits'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0 and "scenes read 6, skipped 0" in res.stdout, res.stderr[-3000:]
    st = suite.cached_suite(str(built), str(tmp_path / "splits"))
    named = {p.scene_id for sp in st.splits.values() for p in sp.pairs}
    assert sorted(st.names) == sorted(named) and len(st.splits["interactive"].pairs) == 4  # only those read


def test_two_hosts_stream_their_own_scene_groups(built, tmp_path):
    """Banks in 4 scene groups, refreshed every 2 updates: one process on 4 devices, and two processes of 2
    devices each (jax.distributed on localhost), where each reads only its own two groups from the stream;
    the metrics agree."""
    from tests.test_parallel import _free_port

    extra = [f"--config.scenes.stream={built}", "--config.scenes.refresh_every=2", "--config.ppo.bank_groups=4",
             "--config.ppo.num_envs=4", "--config.scenes.train=4", "--config.train.total_updates=4"]
    cache, r, m = tmp_path / "proc", tmp_path / "r", tmp_path / "m"
    one = _train(r, cache, devices=4, extra=extra)
    assert one.returncode == 0, one.stderr[-3000:]
    port = _free_port()
    procs = [_train(m, cache, devices=2, extra=extra, process=(i, port)) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "streaming banks of 4 scenes" in err and "(this process's of 4 groups)" in err
    for ra, rb in zip(_metrics(r), _metrics(m), strict=True):
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=1e-3, abs=1e-4), (ra["step"], key)
