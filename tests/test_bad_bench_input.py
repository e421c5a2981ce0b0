"""Bad input to the benchmark, the sweep and the results command (issue #33): refused before any work with
the field named, and a failed benchmark run leaves no staging folder."""

from __future__ import annotations

import os
import types as pytypes

import pytest

from cp_jax.bench import config as bench_config
from cp_jax.bench import suite
from cp_jax.jobs import benchmark, results, sweep
from experiments import sweep_small
from tests.test_results import _config


def _cache(tmp_path, manifests: dict[str, str] | None = None) -> str:
    """A folder that looks like a cache (sim_config.json) with the given split manifests' texts."""
    root = tmp_path / "cache"
    (root / "splits").mkdir(parents=True)
    (root / "sim_config.json").write_text("{}")
    for split, text in (manifests or {}).items():
        (root / "splits" / f"{split}.csv").write_text(text)
    return str(root)


def test_bench_config_refuses_empty_lists_non_caches_and_missing_manifests(tmp_path):
    with pytest.raises(ValueError, match="BenchConfig.regimes: name at least one"):
        bench_config.BenchConfig(regimes=())
    with pytest.raises(ValueError, match="BenchConfig.ego_styles: name at least one style; known: aggressive"):
        bench_config.BenchConfig(ego_styles=())
    (tmp_path / "jsons").mkdir()
    with pytest.raises(ValueError, match="is not a scene cache .no sim_config.json"):
        bench_config.BenchConfig(scenes=str(tmp_path / "jsons"))
    cache = _cache(tmp_path, {"interactive": "scene_id,ego,score\na,1,0.5\n"})
    with pytest.raises(ValueError, match=r"BenchConfig.manifests: .*random.csv: missing"):
        bench_config.BenchConfig(scenes=cache)
    with pytest.raises(ValueError, match=r"BenchConfig.manifests: .*nope: not a folder of split manifests"):
        bench_config.BenchConfig(scenes=cache, manifests=str(tmp_path / "nope"))
    bench_config.BenchConfig(scenes=cache, splits=("interactive",))  # the one it has


def test_bench_config_names_the_traffic_policy_that_does_not_load(tmp_path):
    (tmp_path / "pol").mkdir()  # a folder, but no policy files
    bench = bench_config.BenchConfig(regimes=("ppo",), ppo_policy=str(tmp_path / "pol"))
    with pytest.raises(ValueError, match=r"BenchConfig.ppo_policy: .*pol"):
        bench.traffic()


def test_cached_suite_names_the_manifest_whose_scene_ids_the_cache_lacks(tmp_path, monkeypatch):
    from cp_jax.scenarios import cache as cache_lib

    class Cache:
        def __init__(self, path):
            pass

        def names(self):
            return ["a", "b"]

        def load_bank(self, indices):
            raise AssertionError("no scene is read before the manifests are checked")

    monkeypatch.setattr(cache_lib, "ScenarioCache", Cache)
    root = _cache(tmp_path, {"interactive": "scene_id,ego,score\na,1,0.5\nzz,2,0.1\n"})
    with pytest.raises(ValueError, match=r"interactive.csv: scene ids not in the cache .*\['zz'\]"):
        suite.cached_suite(root, os.path.join(root, "splits"), ("interactive",))


def test_failed_benchmark_run_leaves_no_staging_folder(tmp_path):
    out = tmp_path / "ev"
    out.mkdir()
    (out / "episodes.jsonl").write_text("earlier\n")

    def traffic():
        raise ValueError("BenchConfig.ppo_policy: damaged")

    with pytest.raises(ValueError, match="damaged"):
        benchmark.run_benchmark([], pytypes.SimpleNamespace(traffic=traffic), str(out), progress=False)
    assert sorted(os.listdir(out)) == ["episodes.jsonl"] and (out / "episodes.jsonl").read_text() == "earlier\n"


def test_sweep_refuses_no_variants_unknown_deploy_styles_and_a_missing_sweep_file(tmp_path):
    config = sweep_small.get_config()
    config.variants, config.seeds = (), (0,)
    with pytest.raises(ValueError, match="config.variants and config.seeds: name at least one"):
        sweep.run_configs(config, sweep_small)
    config.variants, config.deploy.styles = ("counterplay",), ("bogus",)
    with pytest.raises(ValueError, match="config.deploy.styles: unknown style 'bogus'"):
        sweep.resolve(config, sweep_small)
    with pytest.raises(FileNotFoundError, match="config.sweep_file: .* is not a file"):
        sweep.sweep_module(str(tmp_path / "nope.py"))
    (tmp_path / "broken.py").write_text("VARIANTS = {\n")
    with pytest.raises(ValueError, match="config.sweep_file: .* does not load .SyntaxError"):
        sweep.sweep_module(str(tmp_path / "broken.py"))


def test_results_refuses_an_only_prefix_that_selects_no_cell(tmp_path):
    from tests.test_results import SWEEP

    config = _config("assets/anchors/conditioned_small", tmp_path)
    config.only = ("bogus/cell",)
    with pytest.raises(ValueError, match=r"config.only: \['bogus/cell'\] select no cell"):
        results.plan(config, SWEEP)
    config.only = ("runs/",)
    assert results.plan(config, SWEEP)
    config.real.scenes = str(tmp_path)  # a folder, not a cache: named as the results file's field
    with pytest.raises(ValueError, match="config.real.scenes: .* is not a scene cache"):
        results.plan(config, SWEEP)
