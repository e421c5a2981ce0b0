"""One self-contained HTML report of a benchmark (or of the results command's tables): it opens from disk,
with every image embedded as a data: URI and its style inline, and needs no network.

    write_report(out, "Benchmark: anchor, counterplay", tables_md, records, curves={"counterplay": run_dir},
                 gallery=Gallery(...))     # -> OUT/report.html

Sections: each policy's score and clean-goal rate per split with 95% intervals (scene bootstrap,
`cp_jax.bench.stats`) and per-regime bar charts, both from the episode records (`cp_jax.bench.report`'s
format; omitted without records); the Markdown tables (tables.md) as HTML; training / post-training curves
from run folders (metrics.jsonl, eval.jsonl); and a failure gallery of two policies' episodes on the same
pairs, side by side as a still and a GIF (drawn by the caller: `cp_jax.jobs.benchmark`), or the line
saying why there is none.
"""

from __future__ import annotations

import base64
import html
import io
import os
import re
import time
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cp_jax.bench import report, stats  # noqa: E402
from cp_jax.bench.episodes import label  # noqa: E402
from cp_jax.io.metrics import read_jsonl  # noqa: E402


class Shown(NamedTuple):
    """One pair of the gallery: its caption, the side-by-side still (PNG bytes) and animation (GIF bytes)."""

    caption: str
    still: bytes
    animation: bytes


class Gallery(NamedTuple):
    """Two policies' episodes on the pairs of one split and regime (benchmark seed 0), in groups."""

    a: str  # drawn left
    b: str  # drawn right
    split: str
    regime: str
    groups: dict[str, tuple[int, list[Shown]]]  # heading -> (pairs in the group, those drawn)


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1240px; padding: 0 16px; color: #222; }
h1 { font-size: 22px; } h2 { border-bottom: 1px solid #ccc; margin-top: 36px; } h3, h4 { margin-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 12.5px; }
th, td { border: 1px solid #d0d0d0; padding: 3px 7px; text-align: right; }
th:first-child, td:first-child { text-align: left; } th { background: #f0f0f0; }
tr:nth-child(even) td { background: #fafafa; }
.meta, .note { color: #666; } nav a { margin-right: 14px; }
img { max-width: 100%; } figure { margin: 6px 0 18px; } figcaption { font-size: 12.5px; color: #444; }
.pair { display: flex; gap: 12px; align-items: flex-start; }
code { background: #f3f3f3; padding: 0 3px; }
"""


def _data_uri(data: bytes, kind: str) -> str:
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def _png(fig) -> str:
    """A matplotlib figure as an embedded PNG <img> (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return f'<img alt="chart" src="{_data_uri(buf.getvalue(), "png")}">'


def _inline(text: str) -> str:
    """Markdown's **bold**, *italic* and `code` of one escaped line."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r"\*(.+?)\*", r"<i>\1</i>", text)


def markdown_html(text: str) -> str:
    """The Markdown the tables are written in (cp_jax.bench.report, the results command's header) as HTML:
    headings, '- ' items, pipe tables (the first row their head) and paragraphs."""
    out, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*-+\s*\|)+", line):
                rows.append([_inline(c.strip()) for c in line.strip("|").split("|")])
            continue
        if rows:
            head, *body = rows
            out.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in body) + "</table>")
            rows = []
        if m := re.match(r"(#+) (.*)", line):
            level = min(len(m[1]) + 1, 4)  # the page's own title is the h1
            out.append(f"<h{level}>{_inline(m[2])}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return re.sub(r"(<li>.*</li>\n?)+", lambda m: f"<ul>{m[0]}</ul>", "\n".join(out))


def interval_table(records: list[dict]) -> str:
    """Per split, each policy's score and clean-goal rate (%) over its (scene, ego) pairs (each pair's mean
    over every regime and benchmark seed; the first ego style) with 95% intervals from the scene bootstrap of
    `cp_jax.bench.stats` (a level is its paired difference from 0), as HTML."""
    style = records[0]["ego_style"]
    regimes = list(dict.fromkeys(r["regime"] for r in records))
    out = [f"<p>Mean over (scene, ego) pairs, every regime ({len(regimes)}) and benchmark seed, ego style {style}; "
           "[95% interval, bootstrap over scenes]. Uncontrollable egos excluded.</p>"]
    for split in dict.fromkeys(r["split"] for r in records):
        means = {k: stats.run_pair_means(records, regimes, split, k, style, group=False) for k in ("score", "clean")}
        rows = []
        for policy, (pairs,) in means["score"].items():
            cells = [policy, str(len(pairs))]
            for k in ("score", "clean"):
                d = stats.difference(means[k][policy], [dict.fromkeys(means[k][policy][0], 0.0)], stats.METRIC_SCALE[k])
                cells.append(f"{d.mean:.2f} [{d.lo:.2f}, {d.hi:.2f}]")
            rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        out.append(f"<h4>{html.escape(split)}</h4><table><tr><th>policy</th><th>pairs</th><th>score</th>"
                   f"<th>clean goal %</th></tr>{''.join(rows)}</table>")
    return "\n".join(out)


def regime_chart(records: list[dict]) -> str:
    """Bar charts (one per split) of every policy's score per regime, ± std over benchmark seeds where there
    are several (`report.summarise`; the first ego style), as an embedded PNG."""
    style = records[0]["ego_style"]
    summary = [s for s in report.summarise(records) if s["ego_style"] == style]
    splits = list(dict.fromkeys(s["split"] for s in summary))
    policies = list(dict.fromkeys(s["policy"] for s in summary))
    regimes = list(dict.fromkeys(s["regime"] for s in summary))
    fig, axes = plt.subplots(len(splits), 1, figsize=(12, 3.2 * len(splits)), squeeze=False)
    width = 0.8 / len(policies)
    for ax, split in zip(axes[:, 0], splits, strict=True):
        row = {(s["policy"], s["regime"]): s for s in summary if s["split"] == split}
        for i, policy in enumerate(policies):
            cells = [row.get((policy, g), dict(score=np.nan, score_std=np.nan)) for g in regimes]
            std = np.array([c["score_std"] for c in cells], float)
            ax.bar(np.arange(len(regimes)) + (i - (len(policies) - 1) / 2) * width, [c["score"] for c in cells],
                   width, yerr=np.nan_to_num(std) if np.isfinite(std).any() else None, capsize=2, label=policy)
        ax.set_xticks(np.arange(len(regimes)), [label(g) for g in regimes], fontsize=8)
        ax.set(ylabel="score (0-100)", title=f"{split}: score per traffic regime (ego style {style})")
        ax.grid(axis="y", alpha=0.3)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="upper center", ncol=len(policies), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))
    return _png(fig)


def _pooled(rows: list[dict], key: str, points: int = 20) -> tuple[np.ndarray, np.ndarray, int]:
    """rows' rate `key` pooled over non-overlapping windows of k >= 2 consecutive updates (at most
    `points` windows; a shorter last one joins the one before), weighted by each update's finished
    episodes where rows count them: finished episodes come in waves (a short update may finish a few
    early goals, the next the timeouts), so one update's rate alternates. Returns (agent-steps at each
    window's end [W], rate [W], k)."""
    k = max(2, -(-len(rows) // points))
    starts = list(range(0, len(rows), k))
    if len(starts) > 1 and len(rows) - starts[-1] < k:
        starts.pop()  # a short last window joins the one before it
    xs, ys = [], []
    for i, end in zip(starts, [*starts[1:], len(rows)], strict=True):
        win = [r for r in rows[i:end] if r.get(key) is not None]
        if not win:
            continue
        w = np.array([1.0 if r.get("episodes") is None else r["episodes"] for r in win], float)
        y = np.array([r[key] for r in win], float)
        xs.append(rows[end - 1]["agent_steps"])
        ys.append(float(np.sum(w * y) / np.sum(w)) if np.sum(w) > 0 else np.nan)
    return np.array(xs, float), np.array(ys, float), k


def curves_chart(runs: dict[str, str]) -> str:
    """Each run folder's goal rate against the agent-steps it spent: of its own self-play episodes
    (metrics.jsonl: goal_rate, or record_goal_rate for CounterPlay's recorded episodes; pooled over
    windows of updates, `_pooled`) and held out (eval.jsonl: goal, or styles.normal.goal for a training
    run), one line per run, as an embedded PNG."""
    fig, (train, held) = plt.subplots(1, 2, figsize=(12, 3.6))
    windows = set()
    for name, folder in runs.items():
        rows = [r for r in read_jsonl(os.path.join(folder, "metrics.jsonl")) if "agent_steps" in r]
        key = "goal_rate" if rows and "goal_rate" in rows[0] else "record_goal_rate"
        x, y, k = _pooled(rows, key)
        windows.add(k)
        train.plot(x / 1e6, y, ".-", lw=1.2, label=name)
        evals = os.path.join(folder, "eval.jsonl")
        if os.path.exists(evals):
            es = read_jsonl(evals)
            held.plot([e["agent_steps"] / 1e6 for e in es], [e["goal"] if "goal" in e else e["styles"]["normal"]["goal"]
                                                             for e in es], "o-", lw=1.2, label=name)
    per = "/".join(map(str, sorted(windows))) or "2"
    train.set(title=f"goal rate of the run's own self-play episodes (per {per} logged updates)",
              xlabel="agent-steps spent (M)")
    held.set(title="goal rate held out (validation)", xlabel="agent-steps spent (M)")
    for ax in (train, held):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def gallery_html(gallery: Gallery) -> str:
    """The gallery's groups: per drawn pair, the still and the animation side by side."""
    out = [f"<p>{html.escape(gallery.a)} (left) and {html.escape(gallery.b)} (right) on the same pairs: "
           f"{html.escape(gallery.split)} split, {html.escape(gallery.regime)} traffic, benchmark seed 0. Completed = "
           "goal reached with no collision or off-road. Markers: collision ×, off-road ▲, timeout ○; "
           "the star is the ego's goal.</p>"]
    for heading, (total, shown) in gallery.groups.items():
        out.append(f"<h3>{html.escape(heading)} — {total} pair{'' if total == 1 else 's'}"
                   + (f", {len(shown)} drawn" if len(shown) < total else "") + "</h3>")
        for s in shown:
            out.append(f"<figure><figcaption>{html.escape(s.caption)}</figcaption><div class=\"pair\">"
                       f'<img alt="still" width="600" src="{_data_uri(s.still, "png")}">'
                       f'<img alt="animation" width="440" src="{_data_uri(s.animation, "gif")}"></div></figure>')
    return "\n".join(out)


def write_report(out_dir: str, title: str, tables_md: str, records: list[dict] = (),
                 curves: dict[str, str] | None = None, gallery: Gallery | str = "") -> str:
    """OUT/report.html (module docstring), written to a temporary name and moved into place; returns its
    path. records: episode records (none: no interval table or charts); curves: {name: run folder};
    gallery: the drawn gallery, or the line saying why there is none ("": no such section)."""
    sections = []
    if records:
        sections += [("Score and clean-goal rate", interval_table(records)),
                     ("Per regime", regime_chart(records))]
    sections.append(("Tables", markdown_html(tables_md)))
    if curves:
        sections.append(("Training curves", curves_chart(curves)))
    if gallery:
        sections.append(("Failure gallery", gallery_html(gallery) if isinstance(gallery, Gallery)
                         else f'<p class="note">{html.escape(gallery)}</p>'))
    anchors = [re.sub(r"\W+", "-", name.lower()) for name, _ in sections]
    body = "\n".join(f'<h2 id="{a}">{html.escape(name)}</h2>\n{content}'
                     for a, (name, content) in zip(anchors, sections, strict=True))
    nav = " ".join(f'<a href="#{a}">{html.escape(name)}</a>' for a, (name, _) in zip(anchors, sections, strict=True))
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n<h1>{html.escape(title)}</h1>\n"
            f'<p class="meta">{html.escape(os.path.abspath(out_dir))} · written '
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}</p>\n<nav>{nav}</nav>\n{body}\n</body></html>\n")
    path = os.path.join(out_dir, "report.html")
    with open(path + ".tmp", "w") as f:
        f.write(page)
    os.replace(path + ".tmp", path)
    return path
