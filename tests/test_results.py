"""launch.results on a tiny anchor: cells run at most max_cells at a time and resume, a benchmark cell is
written whole, the tables and results.json come from the finished cells, a changed config is refused."""

from __future__ import annotations

import gzip
import json
import os
import types as pytypes

import jax
import numpy as np
import pytest

from cp_jax.bench import config as bench_config
from cp_jax.jobs import results
from cp_jax.policy import networks, saved
from experiments import results as results_file
from tests.test_post_train import anchor  # noqa: F401  (the tiny anchor fixture)

TINY = {"scenes.train": 2, "scenes.eval": 0, "scenes.agents": 3, "ppo.num_envs": 2, "ppo.rollout_steps": 10,
        "ppo.num_minibatches": 2, "train.ckpt_every": 2, "train.log_every": 1, "train.progress": False}
SWEEP = pytypes.SimpleNamespace(VARIANTS={"ppo_continue": ("ppo_continue", TINY)}, TABLE_II=(), TABLE_IV=(),
                                TABLE_V=())


def _config(anchor, tmp_path):  # noqa: F811
    c = results_file.get_config()
    c.anchor, c.budgets, c.seeds, c.table_i, c.variants = str(anchor), (0.006,), (0,), ("ppo_continue",), ()
    c.variant_budgets = ()
    c.real.variants, c.deploy.styles = ("ppo_continue",), ()
    c.bench.update(dict(splits=("interactive",), regimes=("idm",), seeds=2, pairs=3, procedural_scenes=2,
                        agents=3, figures=0))
    c.cache_dir = str(tmp_path / "scenes")  # every cell's scenes: the runs' banks and the benchmark's
    c.max_cells = 1
    return c


def test_results_run_cell_by_cell_resume_and_refuse_another_config(tmp_path, anchor, monkeypatch):  # noqa: F811
    config, out = _config(anchor, tmp_path), str(tmp_path / "results")
    cells = results.plan(config, SWEEP)
    assert [(c.kind, c.path) for c in cells] == [("post", "runs/B0.6/ppo_continue_s0"), ("bench", "bench/anchor"),
                                                 ("bench", "bench/B0.6/ppo_continue_s0")]
    assert cells[1].config.scenes == "procedural_test"  # the test set, by name
    assert cells[0].config.scenes.cache_dir == cells[1].config.cache_dir == config.cache_dir  # one scene cache

    config.only = ("bench/B",)  # only the run's benchmark: it waits for the run, so nothing runs
    results.run(config, SWEEP, out)
    assert "cells done: 0 / 3" in open(os.path.join(out, "tables.md")).read()
    config.only = ()
    results.run(config, SWEEP, out)  # one cell: the post-training run
    text = open(os.path.join(out, "tables.md")).read()
    assert "cells done: 1 / 3 (partial" in text and "ppo_continue_s0 " in text  # its agent-steps are listed
    assert not os.path.exists(os.path.join(out, "bench"))

    # A benchmark cell killed mid-run leaves only its .partial folder: not done, replaced on the next run.
    os.makedirs(os.path.join(out, "bench", "anchor.partial"))
    open(os.path.join(out, "bench", "anchor.partial", "episodes.jsonl"), "w").write("{truncated")
    config.max_cells = 0
    built, build = [], bench_config.BenchConfig.suite
    monkeypatch.setattr(bench_config.BenchConfig, "suite", lambda self, egos: built.append(self) or build(self, egos))
    results.run(config, SWEEP, out)
    assert len(built) == 1  # the two benchmark cells of one invocation share their scenes
    assert not os.path.exists(os.path.join(out, "bench", "anchor.partial"))
    text = open(os.path.join(out, "tables.md")).read()
    assert "cells done: 3 / 3;" in text and "(partial" not in text
    cell = os.path.join(out, "bench", "anchor")  # its episodes kept compressed (the cells are committed)
    assert os.path.exists(os.path.join(cell, results.EPISODES))
    assert not os.path.exists(os.path.join(cell, "episodes.jsonl"))
    assert len(results.read_episodes(os.path.join(cell, results.EPISODES))) == 3 * 2  # pairs x benchmark seeds
    rows = [line for line in text.splitlines() if line.startswith("| ppo_continue |")]
    assert rows and rows[0].startswith("| ppo_continue | 1 |") and "± n/a" in rows[0]  # one seed: no spread
    assert any("**Differences**" in line for line in text.splitlines())
    page = open(os.path.join(out, "report.html")).read()  # the same tables as one page, no gallery to draw
    assert "<b>Differences</b>" in page and "No gallery: each benchmark cell runs one policy alone" in page
    figures = json.load(open(os.path.join(out, "results.json")))
    row = figures["budgets"]["B0.6"]["table_i"]["interactive"]["ppo_continue"]
    anchor_row = figures["budgets"]["B0.6"]["table_i"]["interactive"]["anchor"]
    assert row["runs"] == 1 and row["score_std"] is None
    diff = row["minus_anchor"]["score"]
    assert diff["pairs"] == 3 and diff["lo"] <= diff["mean"] <= diff["hi"]
    assert diff["mean"] == pytest.approx(row["score"] - anchor_row["score"], abs=1e-6)  # every pair matched

    # The README's headline block comes from results.json (a README without the block is refused).
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{results.README_BEGIN}\nold\n{results.README_END}\nrest\n")
    results.update_readme(str(readme), figures)
    block = readme.read_text()
    assert block.startswith("intro\n<!-- results:begin -->") and block.endswith("<!-- results:end -->\nrest\n")
    assert "| 0.6% | ppo_continue | 1 | " in block and "old" not in block
    with pytest.raises(ValueError, match="no <!-- results:begin -->"):
        results.update_readme(str(tmp_path / "results" / "tables.md"), figures)

    # Nothing left to run: the same command only rewrites the tables. Another config is refused first.
    monkeypatch.setattr(results, "_run_cell", lambda *a: pytest.fail("a finished cell ran again"))
    before = os.path.getmtime(os.path.join(out, "tables.md"))
    assert results.run(config, SWEEP, out) == open(os.path.join(out, "tables.md")).read()
    config.cache_dir = ""  # scenes built in memory (the accelerator image, no TFDS): the same cells, kept
    assert results.run(config, SWEEP, out) == open(os.path.join(out, "tables.md")).read()
    assert os.path.getmtime(os.path.join(out, "tables.md")) == before  # nothing new: not rewritten
    os.utime(os.path.join(out, "tables.md"), (0, 0))  # a cell finished (or copied in) after the tables
    results.run(config, SWEEP, out)
    before = os.path.getmtime(os.path.join(out, "tables.md"))
    assert before > 0  # rewritten
    # The code that makes the tables changed: rewritten too, though no cell is newer; then current again.
    later = before + 1000
    os.utime(os.path.join(out, "tables.md"), (later, later))
    monkeypatch.setattr(results, "tables_code_digest", lambda sweep: "new table code")
    results.run(config, SWEEP, out)
    assert json.load(open(os.path.join(out, "results.json")))["tables_code"] == "new table code"
    assert os.path.getmtime(os.path.join(out, "tables.md")) != later
    # Stored is the digest of the code this process runs (taken as it begins), not of files edited meanwhile.
    codes = iter(["code at start", "edited while it ran"])
    monkeypatch.setattr(results, "tables_code_digest", lambda sweep: next(codes))
    results.run(config, SWEEP, out)
    assert json.load(open(os.path.join(out, "results.json")))["tables_code"] == "code at start"
    monkeypatch.setattr(results, "tables_code_digest", lambda sweep: "code at start")
    os.utime(os.path.join(out, "tables.md"), (later, later))
    results.run(config, SWEEP, out)
    assert os.path.getmtime(os.path.join(out, "tables.md")) == later
    before = later
    config.bench.seeds = 3
    with pytest.raises(ValueError, match="bench/anchor: made with another config .*bench.seeds"):
        results.run(config, SWEEP, out)
    config.bench.seeds = 2
    monkeypatch.setitem(TINY, "ppo.lr", 1e-2)
    with pytest.raises(ValueError, match="runs/B0.6/ppo_continue_s0: made with another config .*ppo.lr"):
        results.run(config, SWEEP, out)
    monkeypatch.delitem(TINY, "ppo.lr")
    # Cells made with another anchor or traffic policy (same folder, other content) are refused too.
    inputs = json.load(open(os.path.join(out, "inputs.json")))
    assert inputs["anchor"]["digest"] == saved.digest(str(anchor))
    inputs["bc_traffic"]["digest"] = "retrained"
    open(os.path.join(out, "inputs.json"), "w").write(json.dumps(inputs))
    with pytest.raises(ValueError, match="cells were made with other policies: bc_traffic"):
        results.run(config, SWEEP, out)
    inputs["bc_traffic"]["digest"] = saved.digest(config.bench.bc_policy)
    # A record made before the network outputs were kept gains them; the same outputs to 1e-3 pass.
    for v in inputs.values():
        v.pop("behaviour")
    open(os.path.join(out, "inputs.json"), "w").write(json.dumps(inputs))
    results.run(config, SWEEP, out)
    inputs = json.load(open(os.path.join(out, "inputs.json")))
    assert np.shape(inputs["anchor"]["behaviour"]) == (2, saved.load(str(anchor)).net.cfg.num_actions + 1)
    inputs["anchor"]["behaviour"][0][0] += 1e-4
    open(os.path.join(out, "inputs.json"), "w").write(json.dumps(inputs))
    results.run(config, SWEEP, out)
    # Same files, but the network code computes something else (an edited activation): refused.
    with monkeypatch.context() as m:
        m.setattr(networks.nn, "gelu", jax.nn.relu)
        with pytest.raises(ValueError, match="anchor .*same files, other outputs: the network code changed"):
            results.run(config, SWEEP, out)
    # A benchmark cell made by other simulator / benchmark / scene code is refused too.
    monkeypatch.setattr(results, "bench_code_digest", lambda: "other")
    with pytest.raises(ValueError, match="bench/anchor: made by other simulator"):
        results.run(config, SWEEP, out)
    assert os.path.getmtime(os.path.join(out, "tables.md")) == before


def test_bench_code_digest_covers_every_module_episodes_depend_on():
    """The digest leaves out the modules that only tabulate or draw stored records (NO_EPISODES): no module
    it hashes may import one of them, or a change there could alter episodes without refusing old cells."""
    import ast
    import pathlib

    root = pathlib.Path(results.__file__).parents[2]
    skipped = {f"cp_jax.bench.{name[:-3]}" for name in results.NO_EPISODES}
    hashed = [p for d in results.BENCH_CODE for p in sorted((root / d).rglob("*.py"))
              if p.name not in results.NO_EPISODES]
    assert {p.name for p in hashed} >= {"episodes.py", "metrics.py", "suite.py", "env.py"}
    for path in hashed:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            assert not skipped & set(names), f"{path.relative_to(root)} imports {skipped & set(names)}"


def test_episodes_stored_as_columns_read_back_exactly(tmp_path):
    """A cell's episodes: float32 metrics in their shortest spelling, other numbers in full, a key a
    record lacks left out again, booleans and strings as they were."""
    import numpy as np

    records = [dict(policy="a", seed=0, ok=True, score=float(np.float32(61.234567)), x=0.1, nan=float("nan"),
                    one=1.0, big=1e300),
               dict(policy="b", seed=1, ok=False, score=float(np.float32(1e-7)), x=1 / 3, nan=0.5, one=1, none=None),
               {}]
    path = str(tmp_path / "e.json.gz")
    results.write_episodes(records, path)
    back = results.read_episodes(path)
    assert back[1:] == records[1:] and set(back[0]) == set(records[0]) and np.isnan(back[0]["nan"])
    assert {k: v for k, v in back[0].items() if k != "nan"} == {k: v for k, v in records[0].items() if k != "nan"}
    assert type(back[0]["one"]) is float and type(back[1]["one"]) is int  # 1.0 stays a float, 1 an int
    text = gzip.open(path).read()
    assert b"61.234566" in text and b"0.1,0.3333333333333333" in text  # float32 shortest; float64 in full
    results.write_episodes([], path)
    assert results.read_episodes(path) == []


def test_table_i_figures_pair_every_method_with_each_reference():
    """Each method's difference from the anchor, PPO-Continue and CounterPlay is matched pair by pair, in
    score points and clean-goal percentage points; no method is differenced from itself."""
    from tests.test_bench_report import _rec

    recs = []
    for i in range(4):  # 4 scenes x 2 runs per method; scene i's scores differ per method
        recs.append(_rec("anchor", "timeout", scene=f"s{i}", score=10.0 + i))
        for seed in (0, 1):
            recs.append(_rec(f"counterplay_s{seed}", "completed", scene=f"s{i}", score=30.0 + i))
            recs.append(_rec(f"ppo_continue_s{seed}", "timeout", scene=f"s{i}", score=12.0 + i))
            recs.append(_rec(f"no_style_s{seed}", "completed" if i % 2 else "timeout", scene=f"s{i}",
                             score=25.0 + i))
    fig = results.table_i_figures(recs, ["idm"], n_boot=200)["interactive"]
    assert fig["no_style"]["runs"] == 2 and fig["anchor"]["runs"] == 1
    minus_cp = fig["no_style"]["minus_counterplay"]
    assert minus_cp["score"]["mean"] == pytest.approx(-5.0) and minus_cp["score"]["pairs"] == 4
    assert minus_cp["score"]["lo"] == pytest.approx(-5.0) and minus_cp["score"]["hi"] == pytest.approx(-5.0)
    assert minus_cp["clean"]["mean"] == pytest.approx(-50.0)  # half its scenes completed, all of CounterPlay's
    assert fig["counterplay"]["minus_ppo_continue"]["score"]["mean"] == pytest.approx(18.0)
    assert fig["ppo_continue"]["minus_anchor"]["clean"]["mean"] == pytest.approx(0.0)
    assert "minus_counterplay" not in fig["counterplay"] and "minus_anchor" not in fig["anchor"]


def test_readme_block_lists_every_budget_and_the_real_scenes_after_the_procedural_ones():
    """The headline block: the anchor's figures per split, then one row per budget x Table I method with its
    difference from the anchor per split, the real test scenes' as "real SPLIT" after the procedural ones;
    a split a budget has no cells for reads "—", and variants outside Table I are left to tables.md."""
    diff = dict(mean=-1.0, lo=-2.0, hi=0.5, pairs=10)
    up = dict(mean=2.25, lo=1.0, hi=3.5, pairs=10)
    row = dict(runs=3, score=60.0, score_std=1.0, clean=80.0, clean_std=2.0,
               minus_anchor=dict(score=diff, clean=up))
    anchor_row = dict(runs=1, score=61.0, score_std=None, clean=81.0, clean_std=None)
    b1 = dict(table_i={"interactive": {"anchor": anchor_row, "counterplay": row, "no_style": row}},
              real_table_i={"random": {"anchor": dict(anchor_row, score=44.0), "counterplay": row}})
    b5 = dict(table_i={"interactive": {"anchor": anchor_row, "counterplay": dict(row, runs=2)}})
    figures = dict(config=dict(table_i=["counterplay", "ppo_continue"], bench=dict(seeds=2)),
                   commit="0123456789", cells_done=5, cells=9, budgets={"B1": b1, "B5": b5})
    lines = results.readme_block(figures).splitlines()
    assert "interactive 61.0 / 81.0, real random 44.0 / 81.0." in lines[1]
    assert "| budget | method | runs | interactive | real random |" in lines
    one = lines.index("| 1% | counterplay | 3 | -1.0 [-2.0, +0.5] / +2.2 [+1.0, +3.5] | "
                      "-1.0 [-2.0, +0.5] / +2.2 [+1.0, +3.5] |")
    assert lines[one + 1] == "| 5% | counterplay | 2 | -1.0 [-2.0, +0.5] / +2.2 [+1.0, +3.5] | — |"
    assert not any("no_style" in line or "ppo_continue" in line for line in lines)
    del b1["real_table_i"]
    assert not any("real" in line for line in results.readme_block(figures).splitlines()[1:])


def test_readme_headline_equals_the_committed_results():
    """README.md and STATUS.md quote test-set figures only from the committed results/results.json, exactly
    (the block `launch.results --readme` writes); without it, none (a results/ folder a user made but did
    not commit is not the project's)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "results", "results.json")
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "results/results.json"], cwd=root,
                             capture_output=True).returncode == 0
    for name in ("README.md", "STATUS.md"):
        text = open(os.path.join(root, name)).read()
        if not tracked:
            assert results.README_BEGIN not in text, name
            continue
        assert results.README_BEGIN in text and results.README_END in text, f"{name}: no results block"
        block = text.split(results.README_BEGIN, 1)[1].split(results.README_END, 1)[0]
        assert results.README_BEGIN + block + results.README_END == results.readme_block(json.load(open(path))), (
            f"{name}: its results block differs from results/results.json: python -m launch.results --out=results "
            "--readme")


def test_policy_digest_follows_the_files_that_drive(tmp_path, anchor):  # noqa: F811
    """saved.digest changes with the parameters, not with the folder's name or its notes."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(str(anchor), copy)
    (copy / "README.md").write_text("notes")
    assert saved.digest(str(copy)) == saved.digest(str(anchor))
    data = bytearray((copy / "params.msgpack").read_bytes())
    data[-1] ^= 1
    (copy / "params.msgpack").write_bytes(bytes(data))
    assert saved.digest(str(copy)) != saved.digest(str(anchor))
    (copy / "sim_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="sim_config.json: missing"):
        saved.digest(str(copy))
