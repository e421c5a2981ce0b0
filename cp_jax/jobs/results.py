"""The results job behind `launch.results`: the paper's tables on the TEST sets, cell by cell, resumable.

    cells = plan(config, sweep)        # every cell, validated before any work
    run(config, sweep, out)            # runs the cells not yet done (at most config.max_cells), then the tables

Cells, each finished whole or not at all (a re-run skips finished cells and restarts a killed one):
- post-training: OUT/runs/B<pct>/VARIANT_sSEED (launch.post_train's outputs; a killed run resumes from
  its checkpoint);
- benchmark: OUT/bench/anchor and OUT/bench/B<pct>/VARIANT_sSEED, each policy alone on the test set
  (config.bench), written to a `.partial` folder and moved into place when complete; Table IV's other
  deployment styles in OUT/bench_<style>/..., the real test scenes in OUT/real/... .
`config.only` restricts an invocation to the cells under some paths and `config.max_cells` to a number
of them; a benchmark cell waits for its post-training run. Tables per budget are built from every
finished benchmark cell (cp_jax.jobs.sweep.tables: Tables I-V,
each method's paired difference from the anchor, PPO-Continue and CounterPlay with bootstrap intervals), and the
real scenes' Table I. OUT/tables.md holds them under a header (command, commit, anchor, date, cells
done / total, agent-steps charged per run); OUT/results.json the Table I figures per budget, split
and method (runs, score and clean-goal mean / std, differences with intervals); OUT/report.html the
same tables as one HTML page (cp_jax.bench.html_report). Each is written to a temporary name and moved
into place.

The finished cells are meant to be committed (.gitignore keeps out checkpoints, TensorBoard logs and
drawings): a post-training run's policy and logs (~0.3 MB), a benchmark cell's episodes as compressed
columns (EPISODES, ~0.55 MB for 32,000), so cells made in one session (or on an accelerator) are there in
the next. A committed unfinished run has no checkpoint and starts again.

A cell begun or finished under another config than the one planned for it now is refused before any
file is touched (each post-training run's run_info.json, each benchmark cell's cell.json), and so is a
folder whose cells read other policies (OUT/inputs.json: the anchor's and the traffic policies' content
digests, and their outputs on a fixed observation, so an edited network is caught too); adding budgets,
seeds or variants only adds cells.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import sys
import time
from typing import NamedTuple

import jax
import ml_collections
import numpy as np

from cp_jax.bench import config as bench_config
from cp_jax.bench import episodes, html_report, report, stats
from cp_jax.io.metrics import json_safe, read_jsonl
from cp_jax.io.run_info import git_revision, write_run_info
from cp_jax.jobs import post_train
from cp_jax.jobs import sweep as sweep_job
from cp_jax.jobs.benchmark import run_benchmark
from cp_jax.policy import saved


class Cell(NamedTuple):
    kind: str  # "post" or "bench"
    path: str  # relative to OUT
    run: str = ""  # the post-training run a bench cell reads (relative to OUT); "" for the anchor
    config: object = None  # post: its post-training ConfigDict; bench: its BenchConfig
    policy: str = ""  # bench: the ego's name in the records


def budget_tag(frac: float) -> str:
    """0.01 -> 'B1', 0.05 -> 'B5', 0.005 -> 'B0.5': the budget in % of the anchor's training."""
    return f"B{100 * frac:g}"


def _budget_config(config, frac: float):
    """The sweep config of one budget: Table I's methods, and the other variants at config.variant_budgets."""
    c = ml_collections.ConfigDict(config.to_dict())
    c.budget_frac = frac
    c.variants = (*config.table_i, *(config.variants if frac in tuple(config.variant_budgets) else ()))
    return c


def _bench(config):
    """The BenchConfig of the procedural test cells: config.bench with the anchor and the scene cache."""
    return bench_config.from_section(config.bench, anchor_policy=config.anchor, cache_dir=config.cache_dir)


def plan(config, sweep) -> list[Cell]:
    """Every cell in run order (post-training, then benchmarks); raises on any invalid field first."""
    if not config.budgets or not config.seeds:
        raise ValueError("config.budgets and config.seeds: name at least one of each")
    for frac in config.budgets:
        if not 0.0 < frac <= 1.0:
            raise ValueError(f"config.budgets: each in (0, 1], got {frac}")
    if config.max_cells < 0:
        raise ValueError(f"config.max_cells must be >= 0, got {config.max_cells}")
    if isinstance(config.only, str):
        raise ValueError(f"config.only must be a tuple of cell path prefixes, got the string {config.only!r}")
    bench = _bench(config)
    styles = tuple(config.deploy.styles)
    bench_deploy = {s: dataclasses.replace(bench, ego_styles=(s,), splits=tuple(config.deploy.splits), figures=0)
                    for s in styles if s not in bench.ego_styles}
    real = None
    if config.real.scenes:
        try:
            real = dataclasses.replace(bench, scenes=config.real.scenes, manifests=config.real.manifests,
                                       splits=tuple(config.real.splits), regimes=tuple(config.real.regimes),
                                       figures=0)
        except ValueError as e:
            raise ValueError(str(e).replace("BenchConfig.", "config.real.")) from None
        unknown = set(config.real.variants) - set(config.table_i)
        if unknown:
            raise ValueError(f"config.real.variants: {sorted(unknown)} are not in config.table_i")
    unknown = set(config.variant_budgets) - set(config.budgets)
    if unknown:
        raise ValueError(f"config.variant_budgets: {sorted(unknown)} are not in config.budgets")
    posts, benches = [], [Cell("bench", "bench/anchor", config=bench, policy="anchor")]
    if real:
        benches.append(Cell("bench", "real/anchor", config=real, policy="anchor"))
    for frac in config.budgets:
        runs, _ = sweep_job.resolve(_budget_config(config, frac), sweep, test_set=True)
        tag = budget_tag(frac)
        for name, c in runs.items():
            c.scenes.cache_dir = config.cache_dir
            run = f"runs/{tag}/{name}"
            posts.append(Cell("post", run, config=c))
            benches.append(Cell("bench", f"bench/{tag}/{name}", run, bench, name))
            method = report.method_of(name)
            for style, b in bench_deploy.items():
                if any(row.get(style) == method for _, row in sweep.TABLE_IV):
                    benches.append(Cell("bench", f"bench_{style}/{tag}/{name}", run, b, name))
            if real and method in config.real.variants:
                benches.append(Cell("bench", f"real/{tag}/{name}", run, real, name))
    for style, b in bench_deploy.items():
        if any(row.get(style) == "anchor" for _, row in sweep.TABLE_IV):
            benches.append(Cell("bench", f"bench_{style}/anchor", config=b, policy="anchor"))
    cells = posts + benches
    unmatched = [p for p in config.only if not any(c.path.startswith(p) for c in cells)]
    if unmatched:
        raise ValueError(f"config.only: {unmatched} select no cell; cell paths look like {cells[0].path}, "
                         f"{benches[0].path} (prefixes such as runs/, bench/, real/)")
    return cells


EPISODES = "episodes.json.gz"  # a benchmark cell's episodes, stored compactly: the cells are committed (docstring)


def done(out: str, cell: Cell) -> bool:
    if cell.kind == "post":
        return os.path.exists(os.path.join(out, cell.path, "post_train.json"))
    return os.path.exists(os.path.join(out, cell.path, EPISODES))


F32_MAX = float(np.finfo(np.float32).max)


def _is_f32(v) -> bool:
    return isinstance(v, float) and (not np.isfinite(v) or (abs(v) <= F32_MAX and float(np.float32(v)) == v))


def write_episodes(records: list[dict], path: str) -> None:
    """Episode records as gzip-compressed JSON columns {key: [value per record]}, ~25x smaller than the
    JSONL and lossless: a column of float32 values (the benchmark's metrics) is spelled in float32's
    shortest digits and named in "float32"; the records lacking a key are listed in "absent"; written whole."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    cols = {k: [r.get(k) for r in records] for k in keys}
    absent = {k: [i for i, r in enumerate(records) if k not in r] for k in keys}
    f32 = [k for k, c in cols.items() if any(isinstance(v, float) for v in c)
           and all(v is None or _is_f32(v) for v in c)]

    def column(k):
        if k not in f32:
            return json.dumps(cols[k], separators=(",", ":"))
        return "[" + ",".join("null" if v is None else json.dumps(v) if not np.isfinite(v) else str(np.float32(v))
                              for v in cols[k]) + "]"

    head = dict(n=len(records), float32=f32, absent={k: v for k, v in absent.items() if v})
    text = json.dumps(head, separators=(",", ":"))[:-1] + ',"columns":{' + ",".join(
        f"{json.dumps(k)}:{column(k)}" for k in keys) + "}}"
    with gzip.open(path + ".tmp", "wt") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def read_episodes(path: str) -> list[dict]:
    """The records write_episodes stored, as they were."""
    with gzip.open(path, "rt") as f:
        stored = json.load(f)
    cols = stored["columns"]
    for k in stored["float32"]:
        cols[k] = [None if v is None else float(np.float32(v)) for v in cols[k]]
    absent = {k: set(v) for k, v in stored["absent"].items()}
    return [{k: c[i] for k, c in cols.items() if i not in absent.get(k, ())} for i in range(stored["n"])]


def _compress(folder: str) -> None:
    """folder/episodes.jsonl (the benchmark's) -> folder/EPISODES."""
    plain = os.path.join(folder, "episodes.jsonl")
    write_episodes(read_jsonl(plain), os.path.join(folder, EPISODES))
    os.remove(plain)


def _plain(x):
    return json.loads(json.dumps(x, default=str))  # tuples as lists, as a stored config reads back


def _cell_config(cell: Cell, anchor: str) -> dict:
    """What a cell's result depends on: a post-training run's config; a benchmark's BenchConfig and ego
    (not where scenes are cached: a bank built in memory is the cached one, so cells made on a machine
    without TFDS, config.cache_dir "", join the others)."""
    if cell.kind == "post":
        c = _plain(cell.config.to_dict())
        c["scenes"].pop("cache_dir", None)
        return c
    bench = {k: v for k, v in dataclasses.asdict(cell.config).items() if k != "cache_dir"}
    return _plain(dict(bench=bench, ego=cell.run or anchor, policy=cell.policy))


BENCH_CODE = ("cp_jax/sim", "cp_jax/bench", "cp_jax/scenarios")  # what a benchmark cell's episodes depend on
NO_EPISODES = ("figures.py", "html_report.py", "report.py", "stats.py")  # cp_jax/bench modules that draw
# or tabulate stored records and compute no episode: changing them leaves every cell valid


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _files_digest(paths: list[str]) -> str:
    """12 hex digits of sha1 over each file's name and source, in the order given."""
    h = hashlib.sha1()
    for path in paths:
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + f.read())
    return h.hexdigest()[:12]


def bench_code_digest() -> str:
    """Hash of the simulator's, the benchmark's and the scene code's source (procedural generator
    included; not the NO_EPISODES modules): a benchmark cell made by other code is refused, so no table
    mixes scenes or rules."""
    return _files_digest([os.path.join(dirpath, name) for d in BENCH_CODE
                          for dirpath, _, files in sorted(os.walk(os.path.join(_ROOT, d)))
                          for name in sorted(f for f in files if f.endswith(".py") and f not in NO_EPISODES)])


def tables_code_digest(sweep) -> str:
    """Hash of the code that turns stored cells into tables.md / results.json (the NO_EPISODES modules, this
    module, the sweep job and the sweep file's rows): a change to it rewrites the tables on the next run."""
    files = [os.path.join(_ROOT, "cp_jax", "bench", m) for m in NO_EPISODES]
    files += [os.path.abspath(__file__), os.path.abspath(sweep_job.__file__)]
    return _files_digest(files + ([os.path.abspath(sweep.__file__)] if getattr(sweep, "__file__", None) else []))


def _stored(out: str, cell: Cell) -> dict | None:
    """The stored run_info.json (post-training) or cell.json (benchmark) of a cell begun or finished."""
    path = os.path.join(out, cell.path, "run_info.json" if cell.kind == "post" else "cell.json")
    return json.load(open(path)) if os.path.exists(path) else None


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _check_resume(out: str, cells: list[Cell], anchor: str) -> None:
    """Refuse, before any work, when a cell already begun or finished was made with another config than
    the one planned for it now, or (a benchmark cell) by other simulator / benchmark / scene code
    (adding cells, budgets or variants is fine: each cell is checked alone). A field present on one side
    only (added to or removed from a dataclass since) is listed, not refused."""
    digest, one_sided = bench_code_digest(), set()
    for cell in cells:
        stored = _stored(out, cell)
        if stored is None:
            continue
        where = os.path.join(out, cell.path)
        if cell.kind == "bench" and stored.get("bench_code") != digest:
            raise ValueError(f"{where}: made by other simulator / benchmark / scene code (digest "
                             f"{stored.get('bench_code')} vs {digest} now, {', '.join(BENCH_CODE)}); its episodes "
                             "would not match the new cells' scenes or rules: use another --out")
        a, b = (_flat(c) for c in (stored["config"], _cell_config(cell, anchor)))
        for where_cached in ("scenes.cache_dir", "bench.cache_dir"):  # not part of a cell (_cell_config)
            a.pop(where_cached, None)
        diff = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        if diff:
            raise ValueError(f"{where}: made with another config ({', '.join(diff[:6])}"
                             f"{' ...' if len(diff) > 6 else ''} differ); use another --out or restore the config")
        one_sided |= set(a) ^ set(b)
    if one_sided:
        print(f"results: fields added or removed since some cells were made (not compared): {sorted(one_sided)}")


def _check_inputs(out: str, config) -> None:
    """The saved policies every cell reads (the anchor, the PPO and BC traffic policies): their files' digest
    and what the network code computes from them (`saved.behaviour`, compared to 1e-3), recorded in
    OUT/inputs.json with the first cell. A later run that finds either changed (a newly shipped anchor, a
    retrained traffic policy, an edited network) is refused before any work, so no table mixes them; a
    record made before a field existed gains it."""
    bench = _bench(config)
    now = {}
    for role, folder in (("anchor", config.anchor), ("ppo_traffic", bench.ppo_policy), ("bc_traffic", bench.bc_policy)):
        acts = saved.behaviour(saved.load(folder))
        now[role] = dict(folder=folder, digest=saved.digest(folder), behaviour=np.round(acts, 4).tolist())
    path = os.path.join(out, "inputs.json")
    before = json.load(open(path)) if os.path.exists(path) else {}
    changed = []
    for role, v in now.items():
        if role not in before:
            continue
        if before[role]["digest"] != v["digest"]:
            changed.append(f"{role} {v['folder']} (files: digest {before[role]['digest']} then, {v['digest']} now)")
        elif "behaviour" in before[role]:
            then, acts = np.asarray(before[role]["behaviour"]), np.asarray(v["behaviour"])
            if then.shape != acts.shape or not np.allclose(then, acts, rtol=1e-3, atol=1e-3):
                gap = f"{np.abs(then - acts).max():.4g}" if then.shape == acts.shape else "other shapes"
                changed.append(f"{role} {v['folder']} (same files, other outputs: the network code changed; "
                               f"largest logit / value difference {gap})")
    if changed:
        raise ValueError(f"{out}: cells were made with other policies: {'; '.join(changed)}; use another --out "
                         "or restore them")
    if all(role in before and set(v) <= set(before[role]) for role, v in now.items()):
        return
    os.makedirs(out, exist_ok=True)
    _atomic_write(path, json.dumps({**before, **{r: {**before.get(r, {}), **v} for r, v in now.items()}}))


def _run_cell(out: str, cell: Cell, anchor: str, scenes: dict | None = None) -> None:
    """Run one cell into OUT/cell.path (a benchmark cell via a .partial folder); scenes: the dict that keeps
    the benchmark's scenes across the cells of one invocation (`run_benchmark`)."""
    target = os.path.join(out, cell.path)
    if cell.kind == "post":
        post_train.post_train(cell.config, target)
        return
    folder = os.path.join(out, cell.run, "policy") if cell.run else anchor
    ego = episodes.from_saved(cell.policy, saved.load(folder))
    partial = target + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    run_benchmark([ego], cell.config, partial, progress=False, scenes=scenes)
    _compress(partial)
    shutil.rmtree(target, ignore_errors=True)  # a cell folder that is not done (e.g. committed without episodes)
    with open(os.path.join(partial, "cell.json"), "w") as f:
        json.dump(dict(config=_cell_config(cell, anchor), bench_code=bench_code_digest(), commit=git_revision(),
                       backend=jax.default_backend()), f, indent=1)  # (which machine made it: cpu, gpu, tpu)
    os.replace(partial, target)


def run(config, sweep, out: str) -> str:
    """Run the cells not done yet (module docstring), then write the tables; returns tables.md's text.
    sweep: the sweep file's module (its VARIANTS and TABLE_*; cp_jax.jobs.sweep.sweep_module)."""
    code = tables_code_digest(sweep)  # of the table code this process runs (it may change on disk meanwhile)
    cells = plan(config, sweep)
    _check_resume(out, cells, config.anchor)
    _check_inputs(out, config)
    write_run_info(out, config)
    todo = [c for c in cells if not done(out, c) and (not config.only or c.path.startswith(tuple(config.only)))]
    planned = {c.path for c in todo if c.kind == "post"}
    waiting = [c for c in todo if c.kind == "bench" and c.run and c.run not in planned
               and not os.path.exists(os.path.join(out, c.run, "post_train.json"))]
    if waiting:
        print(f"results: {len(waiting)} benchmark cells wait for post-training runs not selected "
              f"(e.g. {waiting[0].run})")
        todo = [c for c in todo if c not in waiting]
    limit = config.max_cells or len(todo)
    t0 = time.time()
    print(f"results: {len(cells)} cells, {sum(done(out, c) for c in cells)} done; running {min(limit, len(todo))} now "
          f"-> {out}", flush=True)
    scenes = {}  # the benchmark cells' scenes, built once per BenchConfig
    for i, cell in enumerate(todo[:limit]):
        print(f"[{time.time() - t0:6.0f}s] cell {i + 1}/{min(limit, len(todo))}: {cell.path}", flush=True)
        _run_cell(out, cell, config.anchor, scenes)
    tables, figures = os.path.join(out, "tables.md"), os.path.join(out, "results.json")
    if not todo and os.path.exists(tables) and os.path.exists(figures) and all(
            os.path.getmtime(os.path.join(out, c.path)) <= os.path.getmtime(tables) for c in cells if done(out, c)
    ) and json.load(open(figures)).get("tables_code") == code:
        print(f"results: nothing new to run; {out}/tables.md is current")  # (newer cells or table code: rewritten)
        return open(tables).read()
    return write_tables(config, sweep, out, cells, code)


def _records(out: str, cells: list[Cell], prefix: str, tag: str | None) -> list[dict]:
    """Episode records of the finished bench cells under `prefix`: the anchor's (tag None) or the runs of
    budget `tag`."""
    recs = []
    for c in cells:
        mine = not c.run if tag is None else bool(c.run) and c.path.split("/")[1] == tag
        if c.kind == "bench" and c.path.split("/")[0] == prefix and mine and done(out, c):
            recs += read_episodes(os.path.join(out, c.path, EPISODES))
    return recs


def table_i_figures(records: list[dict], regimes: list[str], n_boot: int) -> dict:
    """{split: {method: runs, score / clean mean and std over runs, and each difference from the anchor,
    PPO-Continue and CounterPlay (minus_REF: mean, lo, hi, pairs)}} from normal-style records."""
    kept = [r for r in records if r["ego_controlled"] and r["ego_style"] == "normal"]
    out = {}
    for split in dict.fromkeys(r["split"] for r in kept):
        rs = [r for r in kept if r["split"] == split]
        methods = {}
        for policy, m in report.run_means(rs, regimes, split, "normal").items():
            methods.setdefault(report.method_of(policy), []).append(dict(score=m["score"], clean=100 * m["clean"]))
        out[split] = {}
        means = {k: stats.run_pair_means(rs, regimes, split, k) for k in ("score", "clean")}
        for method, runs in methods.items():
            row = dict(runs=len(runs))
            for k in ("score", "clean"):
                vals = [r[k] for r in runs]
                row[k] = float(np.mean(vals))
                std = stats.sample_std(vals)
                row[f"{k}_std"] = std if np.isfinite(std) else None
            for ref in sweep_job.REFERENCES:
                if ref in methods and ref != method:
                    row[f"minus_{ref}"] = {k: stats.difference(means[k].get(method, []), means[k].get(ref, []),
                                                               stats.METRIC_SCALE[k], n_boot)._asdict()
                                           for k in ("score", "clean")}
            out[split][method] = row
    return out


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _short(commit: str) -> str:
    """'445aa2b44eaf...+dirty' -> '445aa2b44eaf+dirty'."""
    return commit.split("+")[0][:12] + ("+dirty" if commit.endswith("+dirty") else "")


def write_tables(config, sweep, out: str, cells: list[Cell], tables_code: str) -> str:
    """tables.md and results.json from every finished cell (module docstring); tables_code: the
    `tables_code_digest` of the code writing them, taken when the run began."""
    bench = _bench(config)
    regimes = bench.regime_list
    finished = [c for c in cells if done(out, c)]
    n_done = len(finished)
    commits = sorted({_short((_stored(out, c) or {}).get("commit" if c.kind == "bench" else "git_revision",
                                                          "unknown")) for c in finished})
    header = [
        "# Results on the test sets", "",
        f"- command: `{' '.join(['python -m launch.results', *sys.argv[1:]])}`",
        f"- commit: {git_revision()}; anchor: {config.anchor}; written "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- cells done: {n_done} / {len(cells)}" + ("" if n_done == len(cells) else " (partial: rows missing a "
                                                    "finished benchmark cell are left out)")
        + "; made at " + (f"commits {', '.join(commits) or '—'}" if len(commits) <= 5 else
                          f"{len(commits)} commits (results.json's cell_commits; each cell's own in its folder)")
        + f" (benchmark cells all by the same simulator / benchmark / scene code, {bench_code_digest()})",
        f"- benchmark: {bench.scenes}, {bench.pairs} pairs per split, {bench.seeds} benchmark seeds, regimes "
        f"{', '.join(regimes)}; post-training seeds {tuple(config.seeds)}",
    ]
    blocks, figures = ["\n".join(header)], dict(config=config.to_dict(), commit=git_revision(), cells_done=n_done,
                                                 cells=len(cells), cell_commits=commits,
                                                 tables_code=tables_code, budgets={})
    anchor_recs = _records(out, cells, "bench", None)  # the anchor's cell (no run): shared by every budget
    real_anchor = _records(out, cells, "real", None) if config.real.scenes else []
    for frac in config.budgets:
        tag = budget_tag(frac)
        recs = anchor_recs + _records(out, cells, "bench", tag)
        for style in config.deploy.styles:
            if style not in bench.ego_styles:
                recs += _records(out, cells, f"bench_{style}", None) + _records(out, cells, f"bench_{style}", tag)
        spent = {}
        for c in finished:
            if c.kind == "post" and c.path.startswith(f"runs/{tag}/"):
                spent[c.path.rsplit("/", 1)[1]] = json.load(open(os.path.join(out, c.path, "post_train.json")))[
                    "agent_steps"]
        blocks.append(f"## Budget {100 * frac:g}% of the anchor's training\n\nAgent-steps charged per run: "
                      + (", ".join(f"{k} {v:,.0f}" for k, v in sorted(spent.items())) or "none yet"))
        if recs:
            blocks += sweep_job.tables(recs, bench, config, sweep)
        figures["budgets"][tag] = dict(agent_steps=spent, table_i=table_i_figures(recs, regimes, config.n_boot))
        if config.real.scenes:
            real = real_anchor + _records(out, cells, "real", tag)
            if real:
                rreg = list(config.real.regimes)
                blocks.append("### Real test scenes\n\n" + report.method_tables(real, rreg, "anchor")
                              + "\n\n" + report.difference_table(real, rreg, list(sweep_job.REFERENCES)))
                figures["budgets"][tag]["real_table_i"] = table_i_figures(real, rreg, config.n_boot)
    text = "\n\n".join(blocks) + "\n"
    _atomic_write(os.path.join(out, "tables.md"), text)
    _atomic_write(os.path.join(out, "results.json"), json.dumps(json_safe(figures), indent=1, default=str))
    html_report.write_report(out, "Results on the test sets", text, gallery=(
        "No gallery: each benchmark cell runs one policy alone and keeps its episodes' metrics, not their "
        "trajectories; `python -m launch.evaluate` with two policies draws one."))
    print(text)
    return text


README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"


def readme_block(figures: dict) -> str:
    """The README's headline table from results.json's figures, between README_BEGIN and README_END: the
    anchor's score / clean-goal rate per split (procedural, then the real test scenes' as "real SPLIT"),
    then one row per budget x Table I method (config.table_i; the other variants are in tables.md): its
    runs and, per split, its paired difference from the anchor in score / clean goal with the 95% interval
    of a bootstrap over runs, then scenes ("—" where that split has no cells yet)."""
    per_budget = {tag: {**b["table_i"], **{f"real {s}": rows for s, rows in b.get("real_table_i", {}).items()}}
                  for tag, b in figures["budgets"].items()}
    splits = list(dict.fromkeys(split for rows in per_budget.values() for split in rows))
    anchor = {}  # the anchor's cell is shared by every budget: its first appearance per split
    for rows_by_split in per_budget.values():
        for split, rows in rows_by_split.items():
            if "anchor" in rows:
                anchor.setdefault(split, rows["anchor"])
    lines = [README_BEGIN, f"Test sets (`results/results.json`, commit {figures['commit'][:7]}, "
             f"{figures['cells_done']} / {figures['cells']} cells). The anchor, score / clean goal %: "
             + ", ".join(f"{split} {row['score']:.1f} / {row['clean']:.1f}" for split, row in anchor.items())
             + ". Each method minus the anchor, score / clean goal [95% over runs, then scenes], over its runs x "
             f"{figures['config']['bench']['seeds']} benchmark seeds (budget: % of the anchor's training):", "",
             "| budget | method | runs | " + " | ".join(splits) + " |", "|---" * (3 + len(splits)) + "|"]
    for tag, rows_by_split in per_budget.items():
        methods = [m for m in dict.fromkeys(m for rows in rows_by_split.values() for m in rows)
                   if m in figures["config"]["table_i"]]  # the other variants: results/tables.md
        for method in methods:
            runs = sorted({rows[method]["runs"] for rows in rows_by_split.values() if method in rows})
            cells = []
            for split in splits:
                row = rows_by_split.get(split, {}).get(method)
                if row is None or "minus_anchor" not in row:
                    cells.append("—")
                    continue
                score, clean = (stats.Difference(**row["minus_anchor"][k]).text(1) for k in ("score", "clean"))
                cells.append(f"{score} / {clean}")
            lines.append(f"| {tag[1:]}% | {method} | {'/'.join(map(str, runs))} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, README_END])


def update_readme(path: str, figures: dict) -> None:
    """Replace the block between README_BEGIN and README_END in the file at path (refused without them)."""
    text = open(path).read()
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"{path}: no {README_BEGIN} ... {README_END} block to replace")
    head, rest = text.split(README_BEGIN, 1)
    _atomic_write(path, head + readme_block(figures) + rest.split(README_END, 1)[1])

