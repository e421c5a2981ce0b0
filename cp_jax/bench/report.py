"""Benchmark results: per-episode records -> summary records and the paper-shaped tables.

An episode record is a flat dict: policy, split, regime, ego_style, seed, scene_id, ego, and the
metrics of `cp_jax.bench.metrics.episode_metrics` (goal, timeout, collision, at_fault, non_at_fault,
offroad, comfort, lane_align, lane_center, mean_speed, clean, score) plus ego_controlled. Episodes whose ego
could not be controlled (it starts overlapping another object or inside its goal radius; it would
replay its log) are excluded from every rate and counted in `n_excluded`.

Summary record, one per policy x split x regime x ego style (`summarise`): score and score_std
(0-100; the mean over pairs per seed, then mean and standard deviation over seeds), goal, timeout,
collision, at_fault, non_at_fault, offroad (fractions over all episodes of all seeds), comfort,
lane_align, lane_center, mean_speed (the ego's, m/s; absent from records written before it
existed), n_pairs, seeds, n_excluded.

Tables (Markdown):
- I: score +- std per regime and their mean, one block per split, one row per policy;
- Outcomes: per regime, the share of episodes completed / timeout / at fault / not at fault / off road
  (runs METHOD_sSEED pooled as mean +- std over runs);
- III: the reference policy's (the first) outcome distribution (completed / timeout / at-fault /
  non-at-fault / off-road) and, for every other policy, the share of the reference's completed
  episodes it retains and the share of each reference failure kind it repairs (completes), matched
  episode by episode on (split, regime, ego style, seed, scene, ego);
- IV: score, at-fault and collision rates, goal and timeout rates and the ego's mean speed per ego
  style (mean over regimes), per split: what the style changes, the traffic held fixed.

Over post-training seeds (runs named METHOD_sSEED, `method_of`): `method_tables` (Tables I and III),
`variant_table` (Tables II and V: chosen methods' score, at-fault, off-road, goal and timeout rates)
and `deployment_table` (Table IV: score and at-fault rate per ego deployment condition).
"""

from __future__ import annotations

import collections
import csv
import json
from collections.abc import Iterable

import numpy as np

from cp_jax.bench import stats
from cp_jax.bench.stats import method_of, pm, sample_std
from cp_jax.io.metrics import json_safe

RATES = ("goal", "timeout", "collision", "at_fault", "non_at_fault", "offroad")
SUBSCORES = ("comfort", "lane_align", "lane_center")
SUMMARY_KEYS = ("policy", "split", "regime", "ego_style", "score", "score_std", *RATES, *SUBSCORES,
                "mean_speed", "n_pairs", "seeds", "n_excluded")
FAILURES = ("timeout", "at_fault", "non_at_fault", "offroad")


def _group(records: Iterable[dict], keys: tuple[str, ...]) -> dict[tuple, list[dict]]:
    out = collections.defaultdict(list)
    for r in records:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def summarise(records: list[dict]) -> list[dict]:
    """One summary record per (policy, split, regime, ego_style), in first-seen order."""
    out = []
    for (policy, split, regime, style), rs in _group(records, ("policy", "split", "regime", "ego_style")).items():
        kept = [r for r in rs if r["ego_controlled"]]
        by_seed = _group(kept, ("seed",))
        seed_scores = [np.mean([r["score"] for r in v]) for v in by_seed.values()]
        row = dict(policy=policy, split=split, regime=regime, ego_style=style,
                   score=float(np.mean(seed_scores)) if seed_scores else float("nan"),
                   score_std=sample_std(seed_scores))
        for k in (*RATES, *SUBSCORES):
            row[k] = float(np.mean([float(r[k]) for r in kept])) if kept else float("nan")
        speeds = [float(r["mean_speed"]) for r in kept if "mean_speed" in r]  # absent in older records
        row["mean_speed"] = float(np.mean(speeds)) if speeds else float("nan")
        row["n_pairs"] = len({(r["scene_id"], r["ego"]) for r in kept})
        row["seeds"] = sorted(int(s[0]) for s in by_seed)
        row["n_excluded"] = len(rs) - len(kept)
        out.append(row)
    return out


def write_summary(summary: list[dict], json_path: str, csv_path: str) -> None:
    with open(json_path, "w") as f:
        json.dump(json_safe(summary), f, indent=1)
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_KEYS)
        for row in summary:
            w.writerow([" ".join(map(str, row[k])) if k == "seeds" else row[k] for k in SUMMARY_KEYS])


def table_i(records: list[dict], regimes: list[str], ego_style: str = "normal") -> str:
    """Score ± std over seeds per regime and the mean over regimes; one block per split."""
    from cp_jax.bench.episodes import label

    kept = [r for r in records if r["ego_controlled"] and r["ego_style"] == ego_style]
    lines = [f"**Table I** — score (0–100) ± std over seeds, ego style {ego_style}"]
    for split, rs in _group(kept, ("split",)).items():
        head = ["policy", *[label(g) for g in regimes], "mean"]
        lines += ["", f"*{split[0]}*", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for (policy,), prs in _group(rs, ("policy",)).items():
            cells, per_seed_regime = [], collections.defaultdict(list)
            for regime in regimes:
                seeds = _group([r for r in prs if r["regime"] == regime], ("seed",))
                scores = {s[0]: np.mean([r["score"] for r in v]) for s, v in seeds.items()}
                for s, v in scores.items():
                    per_seed_regime[s].append(v)
                vals = list(scores.values())
                cells.append(pm(np.mean(vals), sample_std(vals)) if vals else "—")
            means = [np.mean(v) for v in per_seed_regime.values() if len(v) == len(regimes)]
            cells.append(pm(np.mean(means), sample_std(means)) if means else "—")
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _outcome(r: dict) -> str:
    if r["clean"]:
        return "completed"
    if r["collision"]:
        return "at_fault" if r["at_fault"] else "non_at_fault"
    return "offroad" if r["offroad"] else "timeout"


def table_iii(records: list[dict], reference: str) -> str:
    """The reference policy's outcome distribution; retention / repair of every other policy."""
    key = ("split", "regime", "ego_style", "seed", "scene_id", "ego")
    kept = [r for r in records if r["ego_controlled"]]
    ref = {tuple(r[k] for k in key): _outcome(r) for r in kept if r["policy"] == reference}
    kinds = ("completed", *FAILURES)
    lines = [f"**Table III** — outcomes of the reference policy `{reference}` (share of episodes, %), and for "
             "the others: retention of its completed episodes and repair (completion) of each of its failure kinds (%)",
             "", "| policy | split | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 2)]
    for (policy, split), rs in _group(kept, ("policy", "split")).items():
        if policy == reference:
            n = max(len(rs), 1)
            counts = collections.Counter(_outcome(r) for r in rs)
            cells = [f"{100 * counts[k] / n:.1f}" for k in kinds]
        else:
            matched = collections.defaultdict(lambda: [0, 0])  # ref outcome -> [completed now, total]
            for r in rs:
                k = tuple(r[x] for x in key)
                if k in ref:
                    matched[ref[k]][1] += 1
                    matched[ref[k]][0] += int(bool(r["clean"]))
            cells = []
            for k in kinds:
                done, total = matched[k]
                label = "retained" if k == "completed" else "repaired"
                cells.append(f"{100 * done / total:.1f} {label} (of {total})" if total else "—")
        lines.append(f"| {policy} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def outcome_table(records: list[dict], regimes: list[str], ego_style: str = "normal") -> str:
    """Per method, split and regime: the share of episodes (%) ending completed (goal, no collision or
    off-road) / timeout / at fault / not at fault / off road (exclusive, `_outcome`), over pairs and
    benchmark seeds; runs METHOD_sSEED are pooled per method as mean ± std (ddof 1) over runs."""
    from cp_jax.bench.episodes import label

    kinds = ("completed", *FAILURES)
    kept = [r for r in records if r["ego_controlled"] and r["ego_style"] == ego_style]
    lines = [f"**Outcomes** — share of episodes (%) per regime, ego style {ego_style}; a method with several "
             "runs METHOD_sSEED: mean ± std over its runs", "",
             "| method | runs | split | regime | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 4)]
    runs = collections.defaultdict(lambda: collections.defaultdict(dict))  # (method, split) -> regime -> policy -> %
    for (policy, split, regime), rs in _group(kept, ("policy", "split", "regime")).items():
        counts = collections.Counter(_outcome(r) for r in rs)
        runs[(method_of(policy), split)][regime][policy] = [100 * counts[k] / len(rs) for k in kinds]
    for (method, split), by_regime in runs.items():
        for regime in [g for g in regimes if g in by_regime]:
            per_run = np.array(list(by_regime[regime].values()))  # [runs, kinds]
            cells = [pm(np.mean(v), sample_std(v), 1) if len(v) > 1 else f"{v[0]:.1f}" for v in per_run.T]
            lines.append(f"| {method} | {len(per_run)} | {split} | {label(regime)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_iv(summary: list[dict]) -> str:
    """Score, at-fault and all collisions, goal, timeout and the ego's mean speed per ego style, mean
    over the regimes run, per split."""
    lines = ["**Table IV** — score, at-fault and all collisions, goal and timeout (%) and the ego's mean speed "
             "per ego style, mean over regimes", "",
             "| policy | split | ego style | score | at-fault % | collision % | goal % | timeout % | speed m/s |",
             "|---" * 9 + "|"]
    keys = ("score", "at_fault", "collision", "goal", "timeout", "mean_speed")
    for (policy, split, style), rows in _group(summary, ("policy", "split", "ego_style")).items():
        m = {k: float(np.mean([r[k] if k != "mean_speed" else r.get(k, np.nan) for r in rows])) for k in keys}
        lines.append(f"| {policy} | {split} | {style} | {m['score']:.2f} | {100 * m['at_fault']:.2f} | "
                     f"{100 * m['collision']:.2f} | {100 * m['goal']:.1f} | {100 * m['timeout']:.1f} | "
                     f"{m['mean_speed']:.2f} |")
    return "\n".join(lines)


def _completed(records: list[dict], key: tuple[str, ...]) -> dict[tuple, str]:
    return {tuple(r[k] for k in key): _outcome(r) for r in records}


def method_tables(records: list[dict], regimes: list[str], reference: str, ego_style: str = "normal") -> str:
    """Tables I and III over post-training seeds: a method's runs are the policies METHOD_sSEED
    (method_of); each run's score (mean over pairs and benchmark seeds) per regime, then mean ± std
    over its runs; Table III's retention / repair are computed per run against `reference` (the
    anchor) episode by episode, then mean ± std over runs."""
    from cp_jax.bench.episodes import label

    kept = [r for r in records if r["ego_controlled"] and r["ego_style"] == ego_style]
    lines = [f"**Table I (methods)** — score (0–100) per regime and its mean, and the clean-goal rate (goal "
             f"reached with no collision or off-road, %, mean over regimes), mean ± std (ddof 1) over "
             f"post-training seeds, ego style {ego_style}"]
    for (split,), rs in _group(kept, ("split",)).items():
        head = ["method", "runs", *[label(g) for g in regimes], "mean", "clean %"]
        lines += ["", f"*{split}*", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        by_method = collections.defaultdict(dict)
        for (policy,), prs in _group(rs, ("policy",)).items():
            by_method[method_of(policy)][policy] = {
                (g, k): np.mean([float(r[k]) for r in prs if r["regime"] == g])
                for g in regimes for k in ("score", "clean")}
        for method, runs in by_method.items():
            cells = [str(len(runs))]
            for g in regimes:
                vals = [run[(g, "score")] for run in runs.values()]
                cells.append(pm(np.mean(vals), sample_std(vals)))
            for k, scale in (("score", 1.0), ("clean", 100.0)):
                means = [scale * np.mean([run[(g, k)] for g in regimes]) for run in runs.values()]
                cells.append(pm(np.mean(means), sample_std(means)))
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    key = ("split", "regime", "ego_style", "seed", "scene_id", "ego")
    ref = _completed([r for r in kept if r["policy"] == reference], key)
    kinds = ("completed", *FAILURES)
    lines += ["", f"**Table III (methods)** — retention of `{reference}`'s completed episodes and repair of each "
              "of its failure kinds (%), mean ± std over post-training seeds", "",
              "| method | split | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 2)]
    for (split,), rs in _group([r for r in kept if r["policy"] != reference], ("split",)).items():
        per_method = collections.defaultdict(lambda: collections.defaultdict(list))
        for (policy,), prs in _group(rs, ("policy",)).items():
            matched = collections.defaultdict(lambda: [0, 0])
            for r in prs:
                k = tuple(r[x] for x in key)
                if k in ref:
                    matched[ref[k]][1] += 1
                    matched[ref[k]][0] += int(bool(r["clean"]))
            for kind in kinds:
                done, total = matched[kind]
                if total:
                    per_method[method_of(policy)][kind].append(100 * done / total)
        for method, vals in per_method.items():
            cells = [pm(np.mean(vals[k]), sample_std(vals[k])) if vals[k] else "—" for k in kinds]
            lines.append(f"| {method} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def difference_table(records: list[dict], regimes: list[str], references: list[str], ego_style: str = "normal",
                     n_boot: int = 2000, group: bool = True) -> str:
    """Every method's paired difference from each reference (`cp_jax.bench.stats.difference`: over the
    (scene, ego) pairs both ran, all regimes and benchmark seeds, mean over post-training runs), in score
    points and clean-goal percentage points, with 95% intervals bootstrapping runs, then scenes; one block
    per split. group=False: every policy name on its own (launch.evaluate), not runs METHOD_sSEED grouped."""
    kept = [r for r in records if r["ego_controlled"] and r["ego_style"] == ego_style]
    name = method_of if group else (lambda p: p)
    methods = list(dict.fromkeys(name(r["policy"]) for r in kept))
    references = [m for m in references if m in methods]
    head = ["method", *[f"{k} − {ref}" for ref in references for k in ("score", "clean %")]]
    lines = [f"**Differences** — method minus reference over matched (scene, ego) pairs, mean over regimes "
             f"{', '.join(regimes)}, benchmark seeds and post-training runs, [95% bootstrap interval over "
             f"runs, then scenes], ego style {ego_style}"]
    for (split,), rs in _group(kept, ("split",)).items():
        lines += ["", f"*{split}*", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        means = {k: stats.run_pair_means(rs, regimes, split, k, ego_style, group) for k in ("score", "clean")}
        for method in methods:
            if method in references and len(references) == 1:
                continue
            cells = [stats.difference(means[k].get(method, []), means[k].get(ref, []), stats.METRIC_SCALE[k],
                                      n_boot).text() if method != ref else "—"
                     for ref in references for k in ("score", "clean")]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_means(records: list[dict], regimes: list[str], split: str, ego_style: str) -> dict[str, dict[str, float]]:
    """{policy: {score, clean, at_fault, offroad, goal, timeout}}: each regime's mean over its episodes (all
    benchmark seeds), then the mean over `regimes`; only policies with every regime present."""
    rs = [r for r in records if r["ego_controlled"] and r["split"] == split and r["ego_style"] == ego_style]
    out = {}
    for (policy,), prs in _group(rs, ("policy",)).items():
        by_regime = _group(prs, ("regime",))
        if all((g,) in by_regime for g in regimes):
            out[policy] = {k: float(np.mean([np.mean([float(r[k]) for r in by_regime[(g,)]]) for g in regimes]))
                           for k in ("score", "clean", "at_fault", "offroad", "goal", "timeout")}
    return out


def _over_runs(means: dict[str, dict[str, float]], method: str) -> tuple[int, dict[str, tuple[float, float]]]:
    """(number of runs, {metric: (mean, std) over the runs of `method`})."""
    runs = [m for policy, m in means.items() if method_of(policy) == method]
    if not runs:
        return 0, {}
    return len(runs), {k: (float(np.mean([m[k] for m in runs])), float(sample_std([m[k] for m in runs])))
                       for k in runs[0]}


def variant_table(records: list[dict], regimes: list[str], rows: list[tuple[str, str]], title: str,
                  split: str = "interactive", ego_style: str = "normal") -> str:
    """Tables II and V: one line per (label, method) whose runs are in the records (others are left
    out): score and the clean-goal, at-fault, off-road, goal and timeout rates (%), each the mean over
    regimes, mean ± std over the method's runs (post-training seeds)."""
    means = run_means(records, regimes, split, ego_style)
    head = ["variant", "method", "runs", "score", "clean %", "at-fault %", "off-road %", "goal %", "timeout %"]
    lines = [f"**{title}** — {split} split, ego style {ego_style}; means over regimes, ± std over "
             "post-training seeds", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, method in rows:
        n, m = _over_runs(means, method)
        if n:
            pct = [pm(100 * m[k][0], 100 * m[k][1]) for k in ("clean", "at_fault", "offroad", "goal", "timeout")]
            lines.append(f"| {label} | {method} | {n} | {pm(*m['score'])} | " + " | ".join(pct) + " |")
    return "\n".join(lines)


def deployment_table(records: list[dict], regimes: list[str], rows: list[tuple[str, dict[str, str]]],
                     styles: list[str], split: str = "interactive") -> str:
    """Table IV: per row (label, {ego style: method}), the method's score ± std, clean-goal rate and
    at-fault rate (%) when its ego drives under that deployment style, then its number of runs in
    brackets (a partial row shows); "—" where no run was benchmarked so."""
    means = {style: run_means(records, regimes, split, style) for style in styles}
    lines = [f"**Table IV** — ego deployment condition, {split} split: score ± std / clean-goal % / at-fault % "
             "(runs) (means over regimes, ± std over post-training seeds)", "",
             "| method | " + " | ".join(styles) + " |", "|" + "---|" * (len(styles) + 1)]
    for label, by_style in rows:
        cells = []
        for style in styles:
            n, m = _over_runs(means[style], by_style[style]) if style in by_style else (0, {})
            cells.append(f"{pm(*m['score'])} / {100 * m['clean'][0]:.2f} / {100 * m['at_fault'][0]:.2f} ({n})"
                         if n else "—")
        if any(c != "—" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pair_difference_table(records: list[dict], regimes: list[str], pairs: list[tuple[str, str]], title: str,
                          split: str = "interactive", ego_style: str = "normal", n_boot: int = 2000) -> str:
    """Named pairs of methods against each other (e.g. Table II's root rules): a − b per (a, b) both of
    whose runs are in the records, in score and clean-goal points (`stats.difference`, the intervals of
    difference_table); pairs with a side missing are left out."""
    means = {k: stats.run_pair_means(records, regimes, split, k, ego_style) for k in ("score", "clean")}
    lines = [f"**{title}** — a − b over matched (scene, ego) pairs, {split} split, ego style {ego_style}, mean "
             "over regimes, benchmark seeds and post-training runs, [95% bootstrap interval over runs, then scenes]",
             "", "| a − b | score | clean % |", "|---|---|---|"]
    for a, b in pairs:
        if a in means["score"] and b in means["score"]:
            cells = [stats.difference(means[k][a], means[k][b], stats.METRIC_SCALE[k], n_boot).text()
                     for k in ("score", "clean")]
            lines.append(f"| {a} − {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def style_difference_table(records: list[dict], regimes: list[str], styles: list[str], split: str = "interactive",
                           n_boot: int = 2000) -> str:
    """Each method under every deployment style minus the same method under styles[0] (`stats.difference`
    over the (scene, ego) pairs both ran: the same pairs under every style), in score and clean-goal points."""
    base, others = styles[0], styles[1:]
    means = {(s, k): stats.run_pair_means(records, regimes, split, k, s) for s in styles for k in ("score", "clean")}
    head = ["method", *[f"{k} {s} − {base}" for s in others for k in ("score", "clean %")]]
    lines = [f"**Table IV, each method against itself** — under each ego style minus under {base}, {split} split, "
             "mean over regimes, benchmark seeds and post-training runs, [95% bootstrap interval over runs, then "
             "scenes]", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in means[(base, "score")]:
        if not any(method in means[(s, "score")] for s in others):
            continue
        cells = [stats.difference(means[(s, k)][method], means[(base, k)][method], stats.METRIC_SCALE[k],
                                  n_boot).text() if method in means[(s, k)] else "—"
                 for s in others for k in ("score", "clean")]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
