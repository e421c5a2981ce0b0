"""The benchmark job: every ego x split x ego style x regime x seed, one batched episode run each,
then the summary, the tables and the figures (launch.evaluate, the main job and the sweep run it).

    summary = run_benchmark(egos, BenchConfig(...), out)

Writes into `out`: episodes.jsonl (one line per episode: policy, split, regime, ego_style, seed,
scene_id, ego and its metrics), summary.json / summary.csv (cp_jax.bench.report), tables.md
(Tables I, III, IV and, with several egos, each one's paired difference from the first),
pairs.json (per split, the pairs set apart as not drivable, the egos without a route and the goals out of reach:
`cp_jax.bench.suite.drivable`), timing.json, fig_*.png (Fig.-3-style, first two policies side by
side), and last report.html (`cp_jax.bench.html_report`: the tables with intervals, per-regime charts,
`curves` when given, and with two policies or more a gallery of the first two on the same pairs, grouped
by `gallery_groups`).

A caller that benchmarks many policies in one process (the results job) passes the same `scenes` dict to
each call: the scenes and drivable pairs built for one call are kept there (at most SCENES_KEPT sets) and
reused by the next with the same BenchConfig and policies' SimConfigs, instead of being built again (~50 s per cell
on this CPU). The scenes must not change on disk between such calls.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time

import jax
import numpy as np
from tqdm import tqdm

from cp_jax.bench import episodes, figures, html_report, report, suite
from cp_jax.sim import conditions, env

GALLERY = {"repaired": (False, True), "still_failing": (False, False), "broken": (True, False)}  # (a, b) clean
GALLERY_PAIRS = 3  # pairs drawn per gallery group
PARTIAL = ".partial"  # the folder under out that a run writes into before its results move into out
OUTPUTS = ("episodes.jsonl", "summary.json", "tables.md", "report.html")  # what marks a folder as holding results
SCENES_KEPT = 3  # scene sets a `scenes` dict keeps (the results job's: procedural, real, deployment splits)


def run_benchmark(egos, bench, out: str, progress: bool = True, figure_filter=None,
                  curves: dict[str, str] | None = None, echo: bool = True, scenes: dict | None = None) -> list[dict]:
    """Every ego x split x ego style x regime x seed of bench (a `cp_jax.bench.config.BenchConfig`), one
    batched episode run each; writes out's files (module docstring) and returns the summary records.
    figure_filter(outcomes: {policy: clean (bool)}) -> bool picks the pairs drawn (default: outcomes
    differ; `figure_pairs`); curves: {name: run folder} whose training curves the report draws; echo: print
    the tables (False: the caller prints its own summary); scenes: a dict the caller keeps across calls to
    reuse the scenes built (module docstring).

    Written whole or not at all: every file goes to out/.partial first and is moved into out only when the
    run is complete (an interrupted run leaves out's earlier results as they were; report.html comes last)."""
    try:
        return _run(egos, bench, out, progress, figure_filter, curves, echo, scenes)
    except BaseException:  # a run that failed leaves no staging folder (a killed one: the next run clears it)
        shutil.rmtree(os.path.join(out, PARTIAL), ignore_errors=True)
        raise


def _suite(bench, drivers, goal_speed: float, kept: dict | None):
    """(suite cut to the drivable pairs, what was set apart per split, SimConfig) of bench for these
    drivers; from `kept` when an earlier call built the same scenes (module docstring), else built (and
    kept)."""
    key = (bench, tuple(d.sim for d in drivers), goal_speed)  # what the scenes and the drivable pairs depend on
    if kept is not None and key in kept:
        kept[key] = kept.pop(key)  # the most recently used last
        return kept[key]
    st = bench.suite(drivers)
    cfg = episodes.bench_config(st.cfg, *drivers)
    built = (*suite.drivable(suite.for_policies(st, cfg), cfg, goal_speed), cfg)
    if kept is not None:
        kept[key] = built
        while len(kept) > SCENES_KEPT:
            kept.pop(next(iter(kept)))
    return built


def _run(egos, bench, out: str, progress: bool, figure_filter, curves, echo, kept) -> list[dict]:
    """run_benchmark's work."""
    final, out = out, os.path.join(out, PARTIAL)
    shutil.rmtree(out, ignore_errors=True)  # an earlier interrupted run's leftovers
    os.makedirs(out)
    t0 = time.time()
    traffic = bench.traffic()
    regimes, splits, ego_styles, seeds = bench.regime_list, list(bench.splits), list(bench.ego_styles), bench.seeds
    goal_speed = max((float(conditions.field(conditions.STYLES[s], "goal_speed")) for s in ego_styles),
                     default=suite.GOAL_SPEED)
    st, excluded, cfg = _suite(bench, [*egos, *traffic.values()], goal_speed, kept)
    for name in splits:
        sp = st.splits[name]
        print(excluded[name].line(name) + (f" ({sp.warning})" if sp.warning else ""))
    with open(os.path.join(out, "pairs.json"), "w") as f:
        json.dump({name: excluded[name].to_json() for name in splits}, f)
    t_scenes = time.time() - t0

    jobs = [(e, s, style, r, seed) for e in egos for s in splits for style in ego_styles
            for r in regimes for seed in range(seeds)]
    records, keep = [], {}  # keep: the episodes of the policies drawn by the figures and the gallery
    fig_regime = "normal" if "normal" in regimes else regimes[0]
    shown = [e.name for e in egos[:2]] if bench.figures or len(egos) > 1 else []
    t1 = time.time()
    with open(os.path.join(out, "episodes.jsonl"), "w") as f:
        bar = tqdm(jobs, disable=not progress, desc="benchmark (policy, split, regime, seed)", unit=" batches")
        for ego, split, style, regime, seed in bar:
            sp = st.splits[split]
            res = episodes.run(ego, regime, traffic, st.bank, sp.scene, sp.ego, conditions.STYLES[style], seed, cfg)
            for i, pair in enumerate(sp.pairs):
                rec = dict(policy=ego.name, split=split, regime=regime, ego_style=style, seed=seed,
                           scene_id=pair.scene_id, ego=int(pair.ego))
                rec.update({k: (bool(v[i]) if v.dtype == bool else float(v[i])) for k, v in res.metrics.items()})
                records.append(rec)
                f.write(json.dumps(rec) + "\n")
            if ego.name in shown and (split, regime, seed, style) == (splits[0], fig_regime, 0, ego_styles[0]):
                keep[ego.name] = jax.device_get(res.record)
    t_run = time.time() - t1

    summary = report.summarise(records)
    report.write_summary(summary, os.path.join(out, "summary.json"), os.path.join(out, "summary.csv"))
    tables = [report.table_i(records, regimes, s) for s in ego_styles]
    tables += [report.outcome_table(records, regimes, s) for s in ego_styles]
    tables += [report.table_iii(records, egos[0].name), report.table_iv(summary)]
    if len(egos) > 1:
        tables += [report.difference_table(records, regimes, [egos[0].name], s, group=False) for s in ego_styles]
    pairs_note = "\n".join(f"- {excluded[name].line(name)}" for name in splits)
    text = "\n\n".join([pairs_note, *tables]) + "\n"
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write(text)
    if echo:
        print(text)
    if bench.figures:
        _figures(st, shown, keep, records, fig_regime, splits[0], out, bench.figures, figure_filter)
    timing = dict(scenes_s=round(t_scenes, 2), episodes_s=round(t_run, 2), total_s=round(time.time() - t0, 2),
                  batches=len(jobs), episodes=len(records), device=str(jax.devices()[0]))
    with open(os.path.join(out, "timing.json"), "w") as f:
        json.dump(timing, f)
    if echo:
        print(json.dumps(timing))
    gallery = (_gallery(st, shown, keep, records, fig_regime, splits[0]) if len(shown) == 2
               else "No gallery: one policy, nothing to compare it with.")
    for name in os.listdir(final):  # the earlier run's figures go with its other results
        if name.startswith("fig_") and name.endswith(".png"):
            os.remove(os.path.join(final, name))
    for name in sorted(os.listdir(out)):
        os.replace(os.path.join(out, name), os.path.join(final, name))
    os.rmdir(out)
    html_report.write_report(final, f"Benchmark: {', '.join(e.name for e in egos)}", text, records, curves, gallery)
    return summary


def figure_pairs(records: list[dict], pairs: list, shown: list[str], regime: str, split: str, count: int | None,
                 figure_filter=None) -> list[int]:
    """Indices into `pairs` (of `split`) of at most `count` (None: all) pairs to draw, in pair order: those
    whose outcomes {policy: clean (bool)} for the `shown` policies (benchmark seed 0, `regime`) pass
    figure_filter (default: the outcomes differ). Only such pairs: a figure never shows what its filter
    does not claim."""
    wanted = figure_filter or (lambda clean: len(set(clean.values())) >= 2)
    outcome = {}
    for r in records:
        if r["split"] == split and r["regime"] == regime and r["seed"] == 0 and r["policy"] in shown:
            outcome.setdefault((r["scene_id"], r["ego"]), {})[r["policy"]] = bool(r["clean"])
    return [i for i, p in enumerate(pairs) if len(outcome.get((p.scene_id, p.ego), {})) == len(shown)
            and wanted(outcome[(p.scene_id, p.ego)])][:count]


def gallery_groups(records: list[dict], pairs: list, a: str, b: str, regime: str, split: str) -> dict[str, list[int]]:
    """{group: indices into `pairs` (of `split`)} of every pair in each GALLERY group, in pair order: the
    pairs whose outcomes (clean) under policies a and b (benchmark seed 0, `regime`) are the group's;
    "repaired": a failed and b completed (`figure_pairs`)."""
    return {group: figure_pairs(records, pairs, [a, b], regime, split, None, lambda c, w=want: (c[a], c[b]) == w)
            for group, want in GALLERY.items()}


def _episodes(st, keep, shown, split, i):
    """(scenario, [numpy dict of each shown policy's EpisodeRecord]) of pair i of split."""
    recs = [{k: np.asarray(v[i]) for k, v in keep[name].__dict__.items()} for name in shown]
    return env.take_scenario(st.bank, int(st.splits[split].scene[i])), recs


def _figures(st, shown, keep, records, regime, split, out, count, figure_filter=None):
    """The pairs `figure_pairs` picks, the first two policies side by side."""
    pairs = st.splits[split].pairs
    picked = figure_pairs(records, pairs, shown, regime, split, count, figure_filter)
    if len(picked) < count:
        print(f"figures: {len(picked)} of {count} drawn ({split}, {regime} traffic): no other pair matched")
    for n, i in enumerate(picked):
        p = pairs[i]
        path = os.path.join(out, f"fig_{n:02d}_{p.scene_id}_ego{p.ego}.png")
        title = f"{split} · {regime} traffic · {p.scene_id} ego {p.ego}"
        figures.side_by_side(path, *_episodes(st, keep, shown, split, i), int(p.ego), shown, title)


def _gallery(st, shown, keep, records, regime, split) -> html_report.Gallery:
    """The report's gallery: the first GALLERY_PAIRS pairs of each `gallery_groups` group, still and GIF."""
    a, b = shown
    pairs = st.splits[split].pairs
    groups = {}
    for group, picked in gallery_groups(records, pairs, a, b, regime, split).items():
        drawn = []
        for i in picked[:GALLERY_PAIRS]:
            p, still, anim = pairs[i], io.BytesIO(), io.BytesIO()
            scenario, recs = _episodes(st, keep, shown, split, i)
            figures.side_by_side(still, scenario, recs, int(p.ego), shown, dpi=55)
            figures.animate(anim, scenario, recs, int(p.ego), shown)
            drawn.append(html_report.Shown(f"{p.scene_id} ego {p.ego}", still.getvalue(), anim.getvalue()))
        outcome = [f"{n} {'completed' if c else 'failed'}" for n, c in zip(shown, GALLERY[group], strict=True)]
        groups[f"{group.replace('_', ' ').capitalize()}: {', '.join(outcome)}"] = (len(picked), drawn)
    return html_report.Gallery(a, b, split, regime, groups)
