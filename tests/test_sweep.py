"""The sweep file: every variant is a valid post-training experiment; the tables name real variants
and are written from the benchmark's records (no post-training run, no simulation)."""

import ml_collections
import pytest

from cp_jax.bench.config import BenchConfig
from cp_jax.jobs import post_train, sweep
from experiments import sweep_small
from tests.test_bench_report import _rec


def test_every_variant_resolves_and_every_table_row_names_a_variant():
    config = sweep_small.get_config()
    config.variants, config.seeds = tuple(sweep_small.VARIANTS), (0,)
    runs = sweep.run_configs(config)
    assert set(runs) == {f"{v}_s0" for v in sweep_small.VARIANTS}
    for c in runs.values():
        post_train.resolve(c)  # a misspelt override key or value raises here
    assert runs["fixed10_s0"].counterplay.window == 10 and runs["cp_no_gate_s0"].counterplay.student_gate is False
    assert runs["cautious_distill_s0"].method == "cautious_distill"
    sweep.resolve(config, sweep_small)  # the benchmark section and Table IV's deployment styles too
    config.bench.scenes = "procedural_test"  # the test set: only the results command reads it
    with pytest.raises(ValueError, match="config.bench.scenes=procedural_test: the test set is read only"):
        sweep.resolve(config, sweep_small)
    sweep.resolve(config, sweep_small, test_set=True)
    config.bench.scenes = "procedural"
    named = {m for _, m in sweep_small.TABLE_II + sweep_small.TABLE_V}
    named |= {m for _, row in sweep_small.TABLE_IV for m in row.values()}
    named |= {m for pair in sweep_small.PAIRS_II for m in pair}
    assert named - {"anchor"} <= set(sweep_small.VARIANTS)
    # launch.sweep reads VARIANTS and the tables from the file --config names.
    from_file = sweep.sweep_module(sweep_small.__file__)
    assert from_file is not sweep_small and set(from_file.VARIANTS) == set(sweep_small.VARIANTS)


def test_tables_include_ii_iv_and_v_rows_for_the_variants_benchmarked():
    config = ml_collections.ConfigDict(dict(deploy=dict(styles=("halfway",), splits=("interactive",))))
    bench = BenchConfig(ego_styles=("normal",), splits=("interactive",), regimes=("idm",))
    recs = [_rec(p, "completed", regime="idm", style=s, score=10.0)
            for p in ("anchor", "counterplay_s0", "only_aggressive_s0", "fixed10_s0") for s in ("normal", "halfway")]
    text = "\n\n".join(sweep.tables(recs, bench, config))
    lines = text.splitlines()
    for title in ("Table I (methods)", "Table III (methods)", "Table II (components)", "Table V (styles searched)",
                  "Table IV", "Table IV, each method against itself"):
        assert any(title in line for line in lines), title
    assert any(line.startswith("| B: fixed rewind 10 | fixed10 | 1 |") for line in lines)
    assert any(line.startswith("| Aggressive | only_aggressive | 1 |") for line in lines)
    # The root rules against each other: fixed10 and counterplay ran (both 10.00), fixed50 and value30 did not.
    assert "| counterplay − fixed10 | +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] |" in lines
    assert not any(line.startswith(("| fixed50 −", "| value30 −", "| counterplay − fixed50")) for line in lines)
    cell = "10.00 ± n/a / 100.00 / 0.00 (1)"
    assert f"| CounterPlay (gated), distilled for normal | {cell} | {cell} |" in lines
    # deploy_halfway was not run: its cell is empty, the row stays (its normal column is counterplay).
    assert f"| CounterPlay (gated), distilled for that condition | {cell} | — |" in lines
    # Each deployment style gets its own paired differences (the normal style's come with Table I).
    assert [line.rsplit(", ", 1)[1] for line in lines if line.startswith("**Differences**")] == [
        "ego style normal", "ego style halfway"]
    # Under halfway every method is also set against the method made for that condition.
    recs += [_rec("deploy_halfway_s0", "completed", regime="idm", style="halfway", score=30.0)]
    lines = "\n\n".join(sweep.tables(recs, bench, config)).splitlines()
    assert f"| CounterPlay (gated), distilled for that condition | {cell} | 30.00 ± n/a / 100.00 / 0.00 (1) |" in lines
    block = lines[max(i for i, line in enumerate(lines) if line.startswith("**Differences**")):]
    assert "| score − deploy_halfway | clean % − deploy_halfway |" in block[4]
    assert any(line.startswith("| counterplay |") and line.endswith("| -20.00 [-20.00, -20.00] | +0.00 [+0.00, "
                                                                    "+0.00] |") for line in block)


def test_a_finished_run_made_with_another_config_is_refused(tmp_path, monkeypatch):
    """A re-run of a sweep keeps its finished runs only when they were made with the config planned now (a
    sweep file whose variants changed meaning, e.g. experiments/tune_small.py after its choices were written
    into the experiment files, is refused instead of tabled under the new names)."""
    import json

    from cp_jax.jobs import loop

    config = sweep_small.get_config()
    config.variants, config.seeds = ("ppo_continue",), (0,)
    planned = sweep.run_configs(config)["ppo_continue_s0"]
    work = tmp_path / "runs" / "ppo_continue_s0"
    work.mkdir(parents=True)
    stored = loop._plain(planned)
    stored["ppo"]["lr"] = 1e-2
    (work / "run_info.json").write_text(json.dumps(dict(config=stored)))
    (work / "post_train.json").write_text("{}")
    monkeypatch.setattr(post_train, "post_train", lambda *a: pytest.fail("a finished run ran again"))
    with pytest.raises(ValueError, match=r"ppo_continue_s0: a finished run made with another config \(ppo.lr"):
        sweep.run(config, sweep_small, str(tmp_path))
    stored["ppo"]["lr"], stored["scenes"]["cache_dir"] = planned.ppo.lr, ""  # where scenes were cached: safe
    (work / "run_info.json").write_text(json.dumps(dict(config=stored)))

    def reached(folder):
        raise RuntimeError("kept: on to the benchmark")

    monkeypatch.setattr(sweep.saved, "load", reached)
    with pytest.raises(RuntimeError, match="kept"):
        sweep.run(config, sweep_small, str(tmp_path))


def test_the_tuning_file_resolves_and_names_the_difference_baseline():
    """experiments/tune_small.py: every setting is a valid post-training experiment, PPO-Continue at its
    file's values is "ppo_continue", and no setting repeats another."""
    from experiments import ppo_continue, tune_small

    config = tune_small.get_config()
    config.seeds = (0,)
    runs = sweep.run_configs(config, tune_small)
    for c in runs.values():
        post_train.resolve(c)
    assert runs["ppo_continue_s0"].ppo.lr == ppo_continue.get_config().ppo.lr
    settings = [(m, tuple(sorted(o.items()))) for m, o in tune_small.VARIANTS.values()]
    assert len(set(settings)) == len(settings)
    assert all(v in tune_small.VARIANTS for _, v in tune_small.TABLE_II)
