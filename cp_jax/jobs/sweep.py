"""The sweep job behind `launch.sweep`: every variant x seed of a sweep file post-trained, then the
benchmark, then Tables I-V over seeds.

    runs = run_configs(config, sweep)     # {VARIANT_sSEED: post-training ConfigDict}
    run(config, sweep, out)

OUT/runs/VARIANT_sSEED: each post-training run (launch.post_train's outputs; finished runs are kept,
so re-running resumes the sweep). OUT/bench: the benchmark of the anchor and every run
(episodes.jsonl, summary.json, tables.md, figures; OUT/bench/deploy_STYLE: Table IV's other ego
styles). OUT/tables.md: Tables I and III (cp_jax.bench.report.method_tables), each method's paired
difference from the anchor, PPO-Continue and CounterPlay with bootstrap intervals (difference_table:
REFERENCES), II and V
(variant_table) and IV (deployment_table), mean ± std over post-training seeds per variant.

A sweep file is a module with get_config(), VARIANTS {name: (experiment module, {dotted key: value})}
and TABLE_II / TABLE_IV / TABLE_V (the rows of those tables: (label, variant)); optional PAIRS_II:
(a, b) variants whose difference a − b Table II also prints.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import time

from cp_jax.bench import config as bench_config
from cp_jax.bench import episodes, report, suite
from cp_jax.io.metrics import read_jsonl
from cp_jax.io.run_info import write_run_info
from cp_jax.jobs import loop, post_train
from cp_jax.jobs.benchmark import run_benchmark
from cp_jax.policy import saved
from cp_jax.sim import conditions


def sweep_module(path: str | None = None):
    """The sweep file as a module (its VARIANTS and TABLE_* live beside get_config): the file at
    `path`, or experiments/sweep_small.py."""
    if not path:
        return importlib.import_module("experiments.sweep_small")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config.sweep_file: {path!r} is not a file (a sweep file such as "
                                "experiments/sweep_small.py)")
    spec = importlib.util.spec_from_file_location("cp_jax_sweep_file", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # whatever the file raised, it is the file that is named
        raise ValueError(f"config.sweep_file: {path!r} does not load ({type(e).__name__}: {e})") from None
    return module


def run_configs(config, sweep=None) -> dict[str, object]:
    """{VARIANT_sSEED: post-training ConfigDict} for the sweep's variants and seeds (sweep: the sweep
    file's module, default experiments/sweep_small.py)."""
    sweep = sweep or sweep_module()
    if not config.variants or not config.seeds:
        raise ValueError("config.variants and config.seeds: name at least one of each "
                         f"(variants: {sorted(sweep.VARIANTS)})")
    unknown = set(config.variants) - set(sweep.VARIANTS)
    if unknown:
        raise ValueError(f"config.variants: unknown {sorted(unknown)}; known: {sorted(sweep.VARIANTS)}")
    out = {}
    for name in config.variants:
        experiment, overrides = sweep.VARIANTS[name]
        for seed in config.seeds:
            c = importlib.import_module(f"experiments.{experiment}").get_config()
            c.anchor, c.budget_frac, c.budget_steps, c.seed = config.anchor, config.budget_frac, 0, int(seed)
            c.train.progress = False
            for dotted, value in overrides.items():
                section, field = dotted.split(".")
                c[section][field] = value
            out[f"{name}_s{seed}"] = c
    return out


def resolve(config, sweep, test_set: bool = False):
    """(runs, BenchConfig): every run and the benchmark validated before any work (test_set: the
    results command's call, the only one allowed to name the procedural test set)."""
    runs = run_configs(config, sweep)
    for c in runs.values():
        post_train.resolve(c)
    bench = bench_config.from_section(config.bench, anchor_policy=config.anchor)
    if not test_set:
        suite.refuse_test_set(bench.scenes, "config.bench.scenes")
    for style in config.deploy.styles:
        if style not in conditions.STYLES:
            raise ValueError(f"config.deploy.styles: unknown style {style!r}; known: {sorted(conditions.STYLES)}")
    if "normal" not in bench.ego_styles:
        raise ValueError("config.bench.ego_styles: Tables II and V read the normal ego style; include 'normal'")
    if config.deploy.styles and not set(config.deploy.splits) <= set(bench.splits):
        raise ValueError(f"config.deploy.splits {tuple(config.deploy.splits)} must be among config.bench.splits "
                         f"{tuple(bench.splits)} (Table IV's normal column comes from the main benchmark)")
    return runs, bench


def run(config, sweep, out: str) -> str:
    """The whole sweep (module docstring); returns the tables' Markdown."""
    runs, bench = resolve(config, sweep)
    write_run_info(out, config)
    t0 = time.time()
    for name, c in runs.items():
        work = os.path.join(out, "runs", name)
        if os.path.exists(os.path.join(work, "post_train.json")):  # finished: kept, if made with this config
            changed = loop.refused_changes(work, c, post_train.RESUME_SAFE)
            if changed:
                raise ValueError(f"{work}: a finished run made with another config ("
                                 + "; ".join(f"{k}: {a!r} then, {b!r} now" for k, a, b in changed[:4])
                                 + "); the sweep file's variants changed meaning: use another --out")
            continue
        print(f"[{time.time() - t0:6.0f}s] {name}", flush=True)
        post_train.post_train(c, work)

    print(f"[{time.time() - t0:6.0f}s] benchmark", flush=True)
    egos = [episodes.from_saved("anchor", saved.load(config.anchor))]
    egos += [episodes.from_saved(n, saved.load(os.path.join(out, "runs", n, "policy"))) for n in runs]
    bench_out = os.path.join(out, "bench")
    # Figures: the anchor (left) beside the first run (right) where that run completes an anchor failure.
    repaired = lambda clean: not clean["anchor"] and clean[egos[1].name] if len(egos) > 1 else False  # noqa: E731
    run_benchmark(egos, bench, bench_out, progress=False, figure_filter=repaired)
    records = read_jsonl(os.path.join(bench_out, "episodes.jsonl"))
    for style in config.deploy.styles:  # Table IV: the variants its rows name, under the other deployment styles
        wanted = {row[style] for _, row in sweep.TABLE_IV if style in row}
        deploy_egos = [e for e in egos if report.method_of(e.name) in wanted]
        if deploy_egos and style not in bench.ego_styles:
            print(f"[{time.time() - t0:6.0f}s] benchmark, ego style {style}", flush=True)
            deploy_out = os.path.join(bench_out, f"deploy_{style}")
            deploy = dataclasses.replace(bench, ego_styles=(style,), splits=tuple(config.deploy.splits), figures=0)
            run_benchmark(deploy_egos, deploy, deploy_out, progress=False)
            records += read_jsonl(os.path.join(deploy_out, "episodes.jsonl"))
    text = "\n\n".join(tables(records, bench, config, sweep))
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write(text)
    print(text)
    spent = {n: json.load(open(os.path.join(out, "runs", n, "post_train.json")))["agent_steps"] for n in runs}
    print(json.dumps(dict(agent_steps=spent, total_s=round(time.time() - t0)), indent=1))
    return text


REFERENCES = ("anchor", "ppo_continue", "counterplay")  # every method's paired difference from each


def tables(records: list[dict], bench, config, sweep=None) -> list[str]:
    """Tables I and III per ego style, II and V per split, IV per deployment split and the Differences
    per ego style, deployment styles included, there also against `condition_methods` (Markdown blocks)."""
    sweep = sweep or sweep_module()
    regimes = bench.regime_list
    out = [report.method_tables(records, regimes, "anchor", s) for s in bench.ego_styles]
    out += [report.difference_table(records, regimes, list(REFERENCES), s) for s in bench.ego_styles]
    for split in bench.splits:
        title = getattr(sweep, "TITLE_II", "Table II (components)")  # a tuning file names its own table
        out.append(report.variant_table(records, regimes, list(sweep.TABLE_II), title, split))
        if getattr(sweep, "PAIRS_II", ()):  # the root rules against each other, not only against CounterPlay
            out.append(report.pair_difference_table(records, regimes, list(sweep.PAIRS_II),
                                                    "Table II, root rules against each other", split))
        out.append(report.variant_table(records, regimes, list(sweep.TABLE_V), "Table V (styles searched)", split))
    if config.deploy.styles:
        styles = list(dict.fromkeys([*bench.ego_styles, *config.deploy.styles]))
        for split in config.deploy.splits:
            out += [report.deployment_table(records, regimes, list(sweep.TABLE_IV), styles, split),
                    report.style_difference_table(records, regimes, styles, split)]
        out += [report.difference_table(records, regimes, [*REFERENCES, *condition_methods(sweep, s)], s)
                for s in config.deploy.styles if s not in bench.ego_styles]
    return out


def condition_methods(sweep, style: str) -> list[str]:
    """The methods Table IV names under `style` only (made for that deployment condition, e.g. CounterPlay
    distilled under it): under that style every method is also compared with them."""
    elsewhere = {m for _, row in sweep.TABLE_IV for s, m in row.items() if s != style}
    return list(dict.fromkeys(row[style] for _, row in sweep.TABLE_IV if style in row and row[style] not in elsewhere))
