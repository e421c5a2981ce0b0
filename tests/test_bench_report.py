"""Benchmark summaries and tables on hand-made episode records (no simulation)."""

import json

import numpy as np
import pytest

from cp_jax.bench import report


def _rec(policy, outcome, seed=0, scene="s0", ego=1, regime="idm", split="interactive", style="normal", score=None):
    flags = dict(goal=False, timeout=False, collision=False, at_fault=False, non_at_fault=False, offroad=False)
    if outcome == "completed":
        flags["goal"] = True
    elif outcome in ("at_fault", "non_at_fault"):
        flags.update(collision=True, **{outcome: True})
    else:
        flags[outcome] = True
    clean = outcome == "completed"
    return dict(policy=policy, split=split, regime=regime, ego_style=style, seed=seed, scene_id=scene, ego=ego,
                clean=clean, score=(80.0 if clean else 0.0) if score is None else score, comfort=0.9,
                lane_align=0.8, lane_center=0.7, ego_controlled=True, **flags)


def test_summary_scores_are_means_per_seed_then_mean_and_std_over_seeds():
    recs = [_rec("a", "completed", seed=0, scene="s0", score=100.0), _rec("a", "timeout", seed=0, scene="s1"),
            _rec("a", "completed", seed=1, scene="s0", score=60.0), _rec("a", "completed", seed=1, scene="s1",
                                                                         score=60.0)]
    recs.append(dict(_rec("a", "completed", seed=1, scene="s2"), ego_controlled=False))
    (row,) = report.summarise(recs)
    assert row["score"] == pytest.approx(np.mean([50.0, 60.0]))
    assert row["score_std"] == pytest.approx(np.std([50.0, 60.0], ddof=1))  # sample std over seeds
    assert row["goal"] == pytest.approx(0.75) and row["timeout"] == pytest.approx(0.25)
    assert row["n_pairs"] == 2 and row["seeds"] == [0, 1] and row["n_excluded"] == 1
    assert set(report.SUMMARY_KEYS) <= set(row)


def test_table_iii_retention_and_repair_are_matched_pair_by_pair():
    ref = [_rec("anchor", o, scene=f"s{i}") for i, o in enumerate(["completed", "completed", "timeout", "timeout",
                                                                     "at_fault", "offroad"])]
    # The other policy keeps one of two completions, repairs one of two timeouts and the off-road.
    new = [_rec("cp", o, scene=f"s{i}") for i, o in enumerate(["completed", "timeout", "completed", "timeout",
                                                                 "at_fault", "completed"])]
    text = report.table_iii(ref + new, "anchor")
    anchor_row = next(line for line in text.splitlines() if line.startswith("| anchor"))
    assert "| 33.3 | 33.3 | 16.7 | 0.0 | 16.7 |" in anchor_row
    cp_row = next(line for line in text.splitlines() if line.startswith("| cp"))
    assert "50.0 retained (of 2)" in cp_row and "50.0 repaired (of 2)" in cp_row
    assert "0.0 repaired (of 1)" in cp_row and "100.0 repaired (of 1)" in cp_row


def test_table_i_has_a_column_per_regime_and_the_mean(tmp_path):
    recs = [_rec("a", "completed", regime=r, seed=s, score=10.0 * (i + 1) + s)
            for i, r in enumerate(["idm", "expert"]) for s in (0, 1)]
    text = report.table_i(recs, ["idm", "expert"])
    row = next(line for line in text.splitlines() if line.startswith("| a"))
    assert row == "| a | 10.50 ± 0.71 | 20.50 ± 0.71 | 15.50 ± 0.71 |"  # ddof 1 over the two seeds
    summary = report.summarise(recs)
    report.write_summary(summary, tmp_path / "s.json", tmp_path / "s.csv")
    assert [r["regime"] for r in json.loads((tmp_path / "s.json").read_text())] == ["idm", "expert"]
    assert (tmp_path / "s.csv").read_text().splitlines()[0].split(",")[:6] == list(report.SUMMARY_KEYS[:6])


def test_method_tables_average_runs_of_a_method_over_post_training_seeds():
    """Runs named METHOD_sSEED form one row: mean ± std of the runs' scores, and of their retention /
    repair of the reference's episodes, each run matched pair by pair."""
    assert report.method_of("counterplay_s2") == "counterplay" and report.method_of("anchor") == "anchor"
    assert report.method_of("only_cautious_normal_s0") == "only_cautious_normal"
    ref = [_rec("anchor", "completed", scene="s0"), _rec("anchor", "timeout", scene="s1")]
    run0 = [_rec("cp_s0", "completed", scene="s0", score=100.0), _rec("cp_s0", "completed", scene="s1", score=60.0)]
    run1 = [_rec("cp_s1", "timeout", scene="s0"), _rec("cp_s1", "timeout", scene="s1")]
    text = report.method_tables(ref + run0 + run1, ["idm"], "anchor")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    # Scores per run: 80 and 0 -> 40 ± 56.57 (ddof 1), clean 100% and 0%; the anchor's single run has no
    # spread: n/a, not ± 0.00.
    assert "| cp | 2 | 40.00 ± 56.57 | 40.00 ± 56.57 | 50.00 ± 70.71 |" in text
    assert "| anchor | 1 | 40.00 ± n/a | 40.00 ± n/a | 50.00 ± n/a |" in text
    # Retention of the completed s0: 100% and 0%; repair of the timeout s1: 100% and 0%.
    table_iii = [line for line in text.splitlines() if line.startswith("| cp | interactive")]
    assert table_iii == ["| cp | interactive | 50.00 ± 70.71 | 50.00 ± 70.71 | — | — | — |"]
    assert "cp" in rows


def test_variant_and_deployment_tables_average_regimes_then_runs():
    """Tables II / V: per run the mean over regimes, then mean ± std over the method's runs; rows
    whose method has no run are left out. Table IV: a row reads each style's column from the method
    named for that style."""
    recs = []
    for run, outcome, score in (("cp_s0", "completed", 100.0), ("cp_s1", "at_fault", 0.0)):
        recs += [_rec(run, outcome, regime=g, score=score) for g in ("idm", "expert")]
    recs += [_rec("anchor", "timeout", regime=g, score=20.0 + 20.0 * (g == "idm")) for g in ("idm", "expert")]
    recs += [_rec("deploy_halfway_s0", "completed", regime=g, style="halfway", score=70.0) for g in ("idm", "expert")]
    text = report.variant_table(recs, ["idm", "expert"], [("A", "anchor"), ("full", "cp"), ("gone", "no_such")], "T")
    assert "| A | anchor | 1 | 30.00 ± n/a | 0.00 ± n/a | 0.00 ± n/a | 0.00 ± n/a | 0.00 ± n/a | 100.00 ± n/a |" in text
    assert ("| full | cp | 2 | 50.00 ± 70.71 | 50.00 ± 70.71 | 50.00 ± 70.71 | 0.00 ± 0.00 | 50.00 ± 70.71 "
            "| 0.00 ± 0.00 |") in text
    assert "no_such" not in text
    # A run missing a regime is not averaged over the regimes it has.
    assert "| A |" not in report.variant_table(recs, ["idm", "expert", "ppo"], [("A", "anchor")], "T")
    table = report.deployment_table(recs, ["idm", "expert"], [("CP", {"normal": "cp", "halfway": "deploy_halfway"}),
                                                              ("Anchor", {"normal": "anchor", "halfway": "anchor"})],
                                    ["normal", "halfway"])
    assert "| CP | 50.00 ± 70.71 / 50.00 / 50.00 (2) | 70.00 ± n/a / 100.00 / 0.00 (1) |" in table
    assert "| Anchor | 30.00 ± n/a / 0.00 / 0.00 (1) | — |" in table


def test_outcome_table_shares_per_regime_and_runs_pooled_per_method():
    recs = [_rec("idm", o, scene=f"s{i}", regime="expert") for i, o in enumerate(["completed", "offroad",
                                                                                   "at_fault", "timeout"])]
    recs += [_rec("b_s0", o, scene=f"s{i}", regime=g) for g in ("expert", "idm")
             for i, o in enumerate(["completed", "completed", "offroad", "offroad"])]
    recs += [_rec("b_s1", o, scene=f"s{i}", regime=g) for g in ("expert", "idm")
             for i, o in enumerate(["completed", "completed", "completed", "offroad"])]
    recs.append(dict(_rec("b_s1", "offroad", scene="s9", regime="idm"), ego_controlled=False))  # excluded
    recs.append(_rec("b_s1", "offroad", scene="s9", regime="idm", style="aggressive"))  # another style
    rows = [line for line in report.outcome_table(recs, ["expert", "idm"]).splitlines() if line.startswith("| ")]
    split_rows = [[c.strip() for c in line.strip("|").split("|")] for line in rows[1:]]
    cells = {tuple(r[:4]): r[4:] for r in split_rows}
    assert cells[("idm", "1", "interactive", "Expert")] == ["25.0", "25.0", "25.0", "0.0", "25.0"]
    # b: runs with 50% and 75% completed -> 62.5 ± std([50, 75], ddof 1) = 17.7; off-road 50 / 25
    assert cells[("b", "2", "interactive", "IDM")] == ["62.5 ± 17.7", "0.0 ± 0.0", "0.0 ± 0.0", "0.0 ± 0.0",
                                                       "37.5 ± 17.7"]
    assert [k[3] for k in cells if k[0] == "b"] == ["Expert", "IDM"]  # regimes in the order given


def test_table_iv_reports_collisions_and_speed_per_ego_style():
    """Each style's row: the mean over regimes of its summary rows; mean_speed averages the episodes."""
    recs = [dict(_rec("a", o, regime=r, style="aggressive", scene=f"s{i}"), mean_speed=8.0 + i + (r == "idm"))
            for r, outcomes in (("idm", ["completed", "at_fault", "non_at_fault", "non_at_fault"]),
                                ("expert", ["completed", "completed", "completed", "completed"]))
            for i, o in enumerate(outcomes)]
    recs += [dict(_rec("a", o, regime=r, style="cautious", scene=f"s{i}"), mean_speed=5.0)
             for r in ("idm", "expert") for i, o in enumerate(["completed", "timeout", "timeout", "non_at_fault"])]
    summary = report.summarise(recs)
    assert summary[0]["mean_speed"] == pytest.approx(10.5) and summary[1]["mean_speed"] == pytest.approx(9.5)
    rows = {line.split(" | ")[2]: line for line in report.table_iv(summary).splitlines() if line.startswith("| a")}
    # idm: 1 of 4 at fault, 3 of 4 collided, 1 goal; expert: 4 goals -> means 12.5 / 37.5 / 62.5 %, 10 m/s
    assert rows["aggressive"].endswith("| 12.50 | 37.50 | 62.5 | 0.0 | 10.00 |")
    assert rows["cautious"].endswith("| 0.00 | 25.00 | 25.0 | 50.0 | 5.00 |")
    old = report.summarise([_rec("a", "completed")])  # records written before mean_speed existed
    assert np.isnan(old[0]["mean_speed"])


def test_sample_std_and_one_seed_prints_na():
    from cp_jax.bench import stats

    assert stats.sample_std([50.0, 60.0]) == pytest.approx(7.0710678)
    assert np.isnan(stats.sample_std([55.0])) and np.isnan(stats.sample_std([]))
    assert stats.pm(55.0, stats.sample_std([55.0])) == "55.00 ± n/a"
    assert stats.pm(55.0, 7.07107) == "55.00 ± 7.07"


def test_paired_difference_matches_pairs_and_averages_runs():
    """Each pair's value is the mean over the method's runs, regimes and seeds; pairs one side lacks are
    left out; the interval resamples the runs, then the scenes: two runs that agree give a zero-width
    interval, two that disagree (+20 and 0) an interval spanning both, a noisy run one around its mean."""
    from cp_jax.bench import stats

    recs = [_rec("anchor", "timeout", scene=f"s{i}", score=10.0) for i in range(4)]
    recs += [_rec("cp_s0", "completed", scene=f"s{i}", score=30.0) for i in range(5)]  # s4: no anchor episode
    recs += [_rec("cp_s1", "timeout", scene=f"s{i}", score=10.0) for i in range(5)]
    recs += [_rec(f"same_s{j}", "timeout", scene=f"s{i}", score=20.0) for i in range(4) for j in range(3)]
    d = stats.paired_difference(recs, "same", "anchor", ["idm"], "interactive")
    assert d.pairs == 4 and (d.mean, d.lo, d.hi) == pytest.approx((10.0, 10.0, 10.0))
    assert d.verdict == "higher" and d.text() == "+10.00 [+10.00, +10.00]"
    d = stats.paired_difference(recs, "cp", "anchor", ["idm"], "interactive")
    assert d.pairs == 4 and (d.mean, d.lo, d.hi) == pytest.approx((10.0, 0.0, 20.0))  # runs drawn {s1,s1}..{s0,s0}
    assert d.verdict == "inconclusive"  # pooling the runs would have called it +10 [+10, +10]
    clean = stats.paired_difference(recs, "cp", "anchor", ["idm"], "interactive", metric="clean")
    assert clean.mean == pytest.approx(50.0)  # one run of two completes every pair: +50 points
    # Both sides' runs are resampled: the reference's disagreeing runs widen the interval the same way.
    reverse = stats.paired_difference(recs, "anchor", "cp", ["idm"], "interactive")
    assert reverse[:3] == pytest.approx((-10.0, -20.0, 0.0))
    # The interval does not depend on the order the records were read in (runs are taken by name).
    spread = [_rec("anchor", "timeout", scene=f"s{i}", score=50.0) for i in range(30)]
    spread += [_rec(f"m_s{j}", "timeout", scene=f"s{i}", score=50.0 + j * 3 + (i * 7) % 5) for j in range(3)
               for i in range(30)]
    d = stats.paired_difference(spread, "m", "anchor", ["idm"], "interactive")
    assert d == stats.paired_difference(spread[::-1], "m", "anchor", ["idm"], "interactive") and d.lo < d.mean < d.hi
    # Differences of +20 and -20 on alternate pairs: mean 0, an interval on both sides of it.
    noisy = [_rec("anchor", "timeout", scene=f"s{i}", score=50.0) for i in range(40)]
    noisy += [_rec("m", "timeout", scene=f"s{i}", score=50.0 + (20.0 if i % 2 else -20.0)) for i in range(40)]
    d = stats.paired_difference(noisy, "m", "anchor", ["idm"], "interactive")
    assert d.mean == pytest.approx(0.0) and -20.0 < d.lo < -2.0 and 2.0 < d.hi < 20.0 and d.verdict == "inconclusive"
    assert d == stats.paired_difference(noisy, "m", "anchor", ["idm"], "interactive")  # fixed generator seed
    # The bootstrap resamples scenes: 20 egos of one scene all +20, of another all -20 -> two clusters, so
    # the interval spans both (resampling the 40 pairs alone would make it narrow).
    clustered = [_rec("anchor", "timeout", scene=f"s{i // 20}", ego=i, score=50.0) for i in range(40)]
    clustered += [_rec("m", "timeout", scene=f"s{i // 20}", ego=i, score=70.0 if i < 20 else 30.0) for i in range(40)]
    d = stats.paired_difference(clustered, "m", "anchor", ["idm"], "interactive")
    assert d.pairs == 40 and (d.mean, d.lo, d.hi) == pytest.approx((0.0, -20.0, 20.0))
    assert stats.paired_difference(noisy, "m", "other", ["idm"], "interactive").text() == "—"


def test_style_difference_table_pairs_each_method_with_itself_under_the_first_style():
    """Table IV's per-method style effect: a method's pairs under each other style minus the same pairs
    under the first one; a method benchmarked under the first style only gets no row."""
    recs = [_rec("anchor", "timeout", scene=f"s{i}", score=40.0) for i in range(3)]
    recs += [_rec("anchor", "completed", scene=f"s{i}", style="halfway", score=50.0) for i in range(4)]  # s3: alone
    recs += [_rec("cp_s0", "completed", scene=f"s{i}", score=60.0) for i in range(3)]
    text = report.style_difference_table(recs, ["idm"], ["normal", "halfway", "aggressive"])
    assert "| method | score halfway − normal | clean % halfway − normal | score aggressive − normal |" in text
    assert "| anchor | +10.00 [+10.00, +10.00] | +100.00 [+100.00, +100.00] | — | — |" in text
    assert "| cp |" not in text


def test_difference_table_has_a_row_per_method_against_each_reference():
    recs = [_rec("anchor", "timeout", scene=f"s{i}", score=10.0) for i in range(3)]
    recs += [_rec("cp_s0", "completed", scene=f"s{i}", score=30.0) for i in range(3)]
    recs += [_rec("ppo_continue_s0", "timeout", scene=f"s{i}", score=0.0) for i in range(3)]
    text = report.difference_table(recs, ["idm"], ["anchor", "ppo_continue"])
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["cp"] == "| cp | +20.00 [+20.00, +20.00] | +100.00 [+100.00, +100.00] | +30.00 [+30.00, +30.00] | " \
                         "+100.00 [+100.00, +100.00] |"
    assert rows["anchor"].startswith("| anchor | — | — | +10.00")


def test_summary_json_is_strict_with_one_seed(tmp_path):
    summary = report.summarise([_rec("a", "completed")])
    assert np.isnan(summary[0]["score_std"])
    report.write_summary(summary, tmp_path / "s.json", tmp_path / "s.csv")
    assert "NaN" not in (tmp_path / "s.json").read_text()
    assert json.loads((tmp_path / "s.json").read_text())[0]["score_std"] is None


def test_figure_pairs_draw_only_what_the_filter_claims():
    """The main job's 'repaired' figures: records store clean as 0.0 / 1.0; only pairs where the anchor
    failed and CounterPlay completed are drawn, never a fallback of other pairs."""
    from types import SimpleNamespace

    from cp_jax.jobs.benchmark import figure_pairs
    from cp_jax.jobs.main import repaired

    pairs = [SimpleNamespace(scene_id=f"s{i}", ego=1) for i in range(5)]
    outcomes = [("timeout", "completed"), ("completed", "completed"), ("timeout", "timeout"),
                ("completed", "at_fault"), ("offroad", "completed")]
    recs = [dict(_rec(p, o, scene=f"s{i}", regime="normal"), clean=float(o == "completed"))
            for i, pair in enumerate(outcomes) for p, o in zip(("anchor", "counterplay"), pair, strict=True)]
    assert figure_pairs(recs, pairs, ["anchor", "counterplay"], "normal", "interactive", 4, repaired) == [0, 4]
    assert figure_pairs(recs, pairs, ["anchor", "counterplay"], "normal", "interactive", 1, repaired) == [0]
    assert figure_pairs(recs, pairs, ["anchor", "counterplay"], "normal", "interactive", 4) == [0, 3, 4]  # differ
    assert figure_pairs(recs, pairs, ["anchor", "counterplay"], "idm", "interactive", 4, repaired) == []


def test_pair_difference_table_prints_a_minus_b_and_skips_pairs_with_a_side_missing():
    recs = [_rec("fixed10_s3", "timeout", scene=f"s{i}", score=10.0) for i in range(3)]
    recs += [_rec("fixed50_s3", "completed", scene=f"s{i}", score=25.0) for i in range(3)]
    text = report.pair_difference_table(recs, ["idm"], [("fixed50", "fixed10"), ("fixed10", "fixed50"),
                                                        ("value30", "fixed10")], "Rules")
    assert "| fixed50 − fixed10 | +15.00 [+15.00, +15.00] | +100.00 [+100.00, +100.00] |" in text
    assert "| fixed10 − fixed50 | -15.00 [-15.00, -15.00] | -100.00 [-100.00, -100.00] |" in text
    assert "value30" not in text
