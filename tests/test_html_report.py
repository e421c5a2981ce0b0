"""The HTML report (cp_jax.bench.html_report) on hand-made records and pictures, its gallery's grouping, the
GIF of two episodes, and (where Chromium is installed) a real browser's screenshot of it."""

import io
import json
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from cp_jax.bench import figures, html_report, report
from cp_jax.jobs import main
from cp_jax.jobs.benchmark import figure_pairs, gallery_groups
from cp_jax.sim.types import INF_T, ROAD_EDGE
from tests.test_bench_report import _rec

# (anchor, counterplay) per pair s0..s5; the decoys below flip every outcome in other cells.
OUTCOMES = [("timeout", "completed"), ("completed", "completed"), ("at_fault", "offroad"),
            ("completed", "at_fault"), ("offroad", "completed"), ("timeout", "timeout")]
PAIRS = [SimpleNamespace(scene_id=f"s{i}", ego=1) for i in range(len(OUTCOMES))]


def _records():
    """Episode records as episodes.jsonl stores them (clean 0.0 / 1.0), the normal regime's seed 0 as
    OUTCOMES, and the same pairs with the outcomes swapped under seed 1, the idm regime and the random split."""
    recs = []
    for i, pair in enumerate(OUTCOMES):
        for policy, outcome in zip(("anchor", "counterplay"), pair, strict=True):
            flipped = "timeout" if outcome == "completed" else "completed"
            for o, cell in ((outcome, {}), (flipped, dict(seed=1)), (flipped, dict(regime="idm")),
                            (flipped, dict(split="random"))):
                r = _rec(policy, o, scene=f"s{i}", **{"regime": "normal", **cell})
                recs.append(dict(r, clean=float(r["clean"]), score=float(r["score"])))
    return recs


def test_gallery_groups_pairs_by_both_outcomes_with_float_clean():
    """Repaired = anchor failed and counterplay completed, read from float clean values (0.0 is falsy, never
    'is False'); still failing = both failed; broken = anchor completed and counterplay failed."""
    groups = gallery_groups(_records(), PAIRS, "anchor", "counterplay", "normal", "interactive")
    assert groups == {"repaired": [0, 4], "still_failing": [2, 5], "broken": [3]}
    assert gallery_groups(_records(), PAIRS, "anchor", "counterplay", "normal", "random")["repaired"] == [3]


def test_main_jobs_repaired_gallery_holds_only_repaired_pairs():
    """The main job benchmarks anchor then CounterPlay first (its gallery's left and right): its report's
    repaired group is exactly the pairs its figure filter draws, each one the anchor failed and CounterPlay
    completed."""
    recs = _records()
    assert main.METHODS[0] == "counterplay"
    repaired = gallery_groups(recs, PAIRS, "anchor", "counterplay", "normal", "interactive")["repaired"]
    assert repaired == figure_pairs(recs, PAIRS, ["anchor", "counterplay"], "normal", "interactive", None,
                                    main.repaired)
    for i in repaired:
        assert OUTCOMES[i][0] != "completed" and OUTCOMES[i][1] == "completed"


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def test_main_jobs_console_headline_is_one_line_per_split_with_the_tables_figures():
    """The main job prints three lines of results, not the tables: each policy's Table I mean (the summary's
    mean over regimes) and the other's paired difference from the anchor with its interval (tables.md's)."""
    from cp_jax.bench import report, stats

    recs = _records()
    summary = report.summarise(recs)
    text = main.headline(recs, summary, "anchor")
    lines = text.splitlines()
    assert len(lines) == 3 and lines[1].startswith("  interactive: anchor ") and lines[2].startswith("  random: ")
    for split, line in zip(("interactive", "random"), lines[1:], strict=True):
        rows = [r for r in summary if r["split"] == split]
        for policy in ("anchor", "counterplay"):
            table_i = np.mean([r["score"] for r in rows if r["policy"] == policy])
            assert f"{policy} {table_i:.2f}" in line
        d = stats.paired_difference(recs, "counterplay", "anchor", ["normal", "idm"], split)
        assert f"({d.text()})" in line


def test_report_is_one_offline_file_with_the_tables_charts_curves_and_gallery(tmp_path):
    recs = _records()
    tables = report.table_i(recs, ["normal", "idm"]) + "\n\n" + report.table_iii(recs, "anchor")
    run = tmp_path / "counterplay"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(dict(step=i, agent_steps=1e3 * i, record_goal_rate=0.9))
                                               + "\n" for i in range(1, 4)))
    (run / "eval.jsonl").write_text(json.dumps(dict(round=0, agent_steps=0.0, goal=0.9)) + "\n")
    shown = html_report.Shown("s0 ego 1", _png("red"), _png("blue"))
    gallery = html_report.Gallery("anchor", "counterplay", "interactive", "normal",
                                  {"Repaired: anchor failed, counterplay completed": (2, [shown])})
    path = html_report.write_report(str(tmp_path), "Benchmark: anchor, counterplay", tables, recs,
                                    {"counterplay": str(run)}, gallery)
    page = open(path).read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counterplay", "report.html"]  # no temporary left
    # The interval table: the mean over (scene, ego) pairs of each pair's mean over regimes and seeds.
    anchor = [r for r in recs if r["policy"] == "anchor" and r["split"] == "interactive"]
    score = np.mean([np.mean([r["score"] for r in anchor if r["scene_id"] == p.scene_id]) for p in PAIRS])
    clean = 100 * np.mean([r["clean"] for r in anchor])
    assert f"<td>{score:.2f} [" in page and f"<td>{clean:.2f} [" in page
    # The Markdown tables as HTML tables: Table III's random split, anchor timeouts s1, s3, CounterPlay completes s3.
    assert "<b>Table III</b>" in page and "<td>50.0 repaired (of 2)</td>" in page and "| anchor" not in page
    assert "Repaired: anchor failed, counterplay completed — 2 pairs, 1 drawn" in page and "s0 ego 1" in page
    # Self-contained: every image embedded (charts: the per-regime bars and the curves), nothing fetched.
    srcs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert srcs and all(s.startswith(("data:image/", "#")) for s in srcs), [s[:40] for s in srcs]
    assert sum(s.startswith("data:image/png") for s in srcs) == 3  # regime bars, curves, the still
    assert sum(s.startswith("data:image/gif") for s in srcs) == 1
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_report_without_records_has_the_tables_and_says_why_there_is_no_gallery(tmp_path):
    """The results command's report: its Markdown tables only, and the line saying why there is no gallery."""
    md = "# Results\n\n- commit: `abc`\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    assert html_report.markdown_html(md) == (
        "<h2>Results</h2>\n<ul><li>commit: <code>abc</code></li>\n</ul><table><tr><th>a</th><th>b</th></tr>"
        "<tr><td>1</td><td>2</td></tr></table>")
    page = open(html_report.write_report(str(tmp_path), "Results", md, gallery="No gallery: no episodes.")).read()
    assert "<td>2</td>" in page and "No gallery: no episodes." in page
    assert "Score and clean-goal rate" not in page and "<img" not in page


def _two_episodes():
    """A straight road and two cars: in the first episode the ego (0) hits the other car at row 5, in the
    second it reaches its goal at row 8; 11 rows."""
    sc = SimpleNamespace(road_valid=np.ones(2, bool), road_type=np.full(2, ROAD_EDGE),
                         road_xy0=np.array([[-5.0, -4.0], [-5.0, 4.0]]), road_xy1=np.array([[60.0, -4.0], [60.0, 4.0]]),
                         agent_valid=np.ones(2, bool), size=np.array([[4.5, 2.0], [4.5, 2.0]]),
                         goal=np.array([[40.0, 0.0], [30.0, 0.0]]))
    t = np.arange(11.0)
    xy = np.stack([np.stack([4 * t, 0 * t], -1), np.stack([30 + 0 * t, 0 * t], -1)], 1)  # [T1, A, 2]
    alive = np.ones((11, 2), bool)
    ev = np.full(2, INF_T, np.int32)
    hit = dict(xy=xy, yaw=np.zeros((11, 2)), alive=alive, goal_t=ev, first_offroad_t=ev,
               first_collision_t=np.array([5, 5], np.int32))
    done = dict(hit, first_collision_t=ev, goal_t=np.array([8, INF_T], np.int32))
    return sc, [hit, done]


def test_animation_plays_both_episodes_and_marks_the_collision():
    sc, recs = _two_episodes()
    buf = figures.animate(io.BytesIO(), sc, recs, 0, ["anchor", "counterplay"], frames=6)
    gif = Image.open(io.BytesIO(buf.getvalue()))
    assert gif.format == "GIF" and gif.n_frames == 6 and gif.size == (440, 240)
    red = []
    for k in (0, 5):
        gif.seek(k)
        rgb = np.asarray(gif.convert("RGB")).astype(int)
        red.append(int(((rgb[..., 0] > 200) & (rgb[..., 1] < 60) & (rgb[..., 2] < 60)).sum()))
    assert red[0] == 0 and red[1] > 20, red  # the collision's red cross from its row on, in the palette's red


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed (apt-get install chromium)")
def test_chromium_draws_the_report(tmp_path):
    from benchmarks.screenshot_report import screenshot

    path = html_report.write_report(str(tmp_path), "Benchmark: anchor, counterplay", report.table_i(
        _records(), ["normal", "idm"]), _records(), gallery="No gallery: a test.")
    png = Image.open(screenshot(path, str(tmp_path / "shot.png"), height=900)).convert("L")
    assert png.size == (1280, 900)
    dark = np.asarray(png) < 100
    assert dark[:200].sum() > 500 and dark[200:].sum() > 5000  # the title, then tables and the chart


def test_training_curve_pools_alternating_updates_by_their_episodes():
    """Finished episodes come in waves: a few early goals in one update, the timeouts in the next. The curve
    pools windows of updates weighted by episodes, so it shows the rate of the episodes, not the alternation."""
    rows = [dict(agent_steps=1000 * (i + 1), episodes=20.0 if i % 2 == 0 else 280.0,
                 goal_rate=1.0 if i % 2 == 0 else 0.9) for i in range(30)]
    x, y, k = html_report._pooled(rows, "goal_rate")
    assert k == 2 and len(x) == 15 and x[0] == 2000 and x[-1] == 30000
    np.testing.assert_allclose(y, (20 * 1.0 + 280 * 0.9) / 300)
    x, y, k = html_report._pooled([dict(agent_steps=i, record_goal_rate=0.5) for i in range(100)], "record_goal_rate")
    assert k == 5 and len(x) == 20 and np.allclose(y, 0.5)  # no episode counts: unweighted
    rows.append(dict(agent_steps=31000, episodes=3.0, goal_rate=1.0))  # a last update alone: joins the window before
    x, y, k = html_report._pooled(rows, "goal_rate")
    assert len(x) == 15 and x[-1] == 31000 and y[-1] == (20 * 1.0 + 280 * 0.9 + 3 * 1.0) / 303
