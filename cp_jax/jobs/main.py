"""The main job (the README's first command): the shipped anchor post-trained with CounterPlay and
with PPO-Continue at the same small budget, then the benchmark of anchor vs both on procedural splits.

    setups, bench = resolve(config)   # every field validated and the anchor read; nothing else runs
    run(config, out)                  # OUT/counterplay, OUT/ppo_continue (each resumes), the benchmark

Writes OUT/summary.json (the benchmark's format), tables.md (Tables I, III, IV), episodes.jsonl,
figures of the anchor's failures that CounterPlay repairs (anchor left, counterplay right) and
report.html (the tables with intervals, per-regime charts, both post-training runs' curves and the
gallery of anchor vs CounterPlay: repaired, still failing, broken; cp_jax.bench.html_report).
"""

from __future__ import annotations

import os
import time

import numpy as np

from cp_jax.bench import config as bench_config
from cp_jax.bench import episodes, stats, suite
from cp_jax.io.metrics import read_jsonl
from cp_jax.io.run_info import write_run_info
from cp_jax.jobs import post_train
from cp_jax.jobs.benchmark import run_benchmark
from cp_jax.policy import saved

METHODS = ("counterplay", "ppo_continue")


def repaired(clean: dict) -> bool:
    """The figures' filter: the anchor failed the pair and CounterPlay completed it ({policy: clean})."""
    return not clean["anchor"] and clean["counterplay"]


def post_configs(config) -> dict:
    """The two post-training configs with the main job's anchor, budget and seed applied."""
    out = {}
    for name in METHODS:
        c = config[name]
        c.anchor, c.budget_frac, c.budget_steps, c.seed = config.anchor, config.budget_frac, 0, config.seed
        out[name] = c
    return out


def resolve(config):
    """({method: post_train.Setup}, BenchConfig): everything validated before any work."""
    setups = {name: post_train.resolve(c) for name, c in post_configs(config).items()}
    bench = bench_config.from_section(config.bench, anchor_policy=config.anchor)
    suite.refuse_test_set(bench.scenes, "config.bench.scenes")
    return setups, bench


def run(config, out: str) -> list[dict]:
    """The whole job (module docstring); returns the benchmark's summary records."""
    setups, bench = resolve(config)
    write_run_info(out, config)
    budget = setups["counterplay"].budget
    print(f"main job: anchor {config.anchor}; CounterPlay and PPO-Continue, {budget:,.0f} agent-steps each "
          f"({100 * config.budget_frac:g}% of the anchor's training); then {len(bench.regime_list)} regimes x "
          f"{len(bench.splits)} splits x {bench.pairs} pairs x 3 policies; each phase shows its progress and its "
          f"time left at the rate measured so far. Output: {out}", flush=True)
    t0 = time.time()
    for name, c in post_configs(config).items():
        print(f"[{time.time() - t0:5.0f}s] post-training: {name}", flush=True)  # its bar: agent-steps, ETA
        post_train.post_train(c, os.path.join(out, name))

    print(f"[{time.time() - t0:5.0f}s] benchmark", flush=True)
    egos = [episodes.from_saved("anchor", saved.load(config.anchor))]
    egos += [episodes.from_saved(name, saved.load(os.path.join(out, name, "policy"))) for name in METHODS]
    summary = run_benchmark(egos, bench, out, figure_filter=repaired,
                            curves={name: os.path.join(out, name) for name in METHODS}, echo=False)
    print(headline(read_jsonl(os.path.join(out, "episodes.jsonl")), summary, "anchor"))
    print(f"done in {time.time() - t0:.0f}s -> {out}/report.html (the page), tables.md (Tables I, III, IV), "
          "summary.json, episodes.jsonl, fig_*.png")
    return summary


def headline(records: list[dict], summary: list[dict], reference: str) -> str:
    """The console's few lines of results: per split, each policy's Table I mean score (over the regimes of
    `summary`, ego style normal) and each other policy's paired difference from `reference` with its 95%
    scene-bootstrap interval (`cp_jax.bench.stats`; the figures of tables.md)."""
    rows = [r for r in summary if r["ego_style"] == "normal"]
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    lines = [f"score (0-100, mean over {len(regimes)} regimes, ego style normal); method - {reference} "
             "[95% interval over scenes]:"]
    for split in dict.fromkeys(r["split"] for r in rows):
        means = stats.run_pair_means(records, regimes, split, "score", "normal", group=False)
        parts = []
        for policy in dict.fromkeys(r["policy"] for r in rows):
            text = f"{policy} {np.mean([r['score'] for r in rows if (r['policy'], r['split']) == (policy, split)]):.2f}"
            if policy != reference:
                d = stats.difference(means.get(policy, []), means.get(reference, []), stats.METRIC_SCALE["score"])
                text += f" ({d.text()})"
            parts.append(text)
        lines.append(f"  {split}: " + " · ".join(parts))
    return "\n".join(lines)
