"""Figures written by runs: the learning curve of a training run, post-training diagnostics."""

from __future__ import annotations

import os

import numpy as np

from cp_jax.io.metrics import read_jsonl

CURVES = (("goal_rate", "goal"), ("collision_rate", "collision"), ("offroad_rate", "off-road"),
          ("timeout_rate", "timeout"))


def _read_run(workdir: str) -> tuple[list[dict], list[dict]]:
    """A training run's logged updates with outcome rates (metrics.jsonl) and evaluations (eval.jsonl)."""
    rows = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r.get("goal_rate") is not None]
    evals_path = os.path.join(workdir, "eval.jsonl")
    return rows, read_jsonl(evals_path) if os.path.exists(evals_path) else []


def learning_curve(workdir: str, png: str) -> str:
    """Training outcome rates vs agent-steps (metrics.jsonl) and held-out normal-style rates
    (eval.jsonl, markers) in one PNG; returns its path."""
    rows, evals = _read_run(workdir)
    return _curve(rows, evals, [], png)


def lineage_curve(runs: list[dict], png: str) -> str:
    """learning_curve over a lineage (cp_jax.io.run_info.lineage, newest first): each run's updates
    drawn after its predecessors' agent-steps, a dashed line where a run starts from the one before;
    runs missing from disk or without metrics are skipped. Returns the PNG's path."""
    rows, evals, starts, offset = [], [], [], 0.0
    for run in reversed(runs):
        folder = run.get("run", "")
        if run.get("missing") or not os.path.exists(os.path.join(folder, "metrics.jsonl")):
            continue
        r, e = _read_run(folder)
        if not r:
            continue
        if rows:
            starts.append((offset, os.path.basename(os.path.normpath(folder))))
        rows += [dict(x, agent_steps=x["agent_steps"] + offset) for x in r]
        evals += [dict(x, agent_steps=x["agent_steps"] + offset) for x in e]
        offset += float(run.get("agent_steps") or r[-1]["agent_steps"])
    return _curve(rows, evals, starts, png)


def _curve(rows: list[dict], evals: list[dict], starts: list[tuple[float, str]], png: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    x = [r["agent_steps"] / 1e6 for r in rows]
    for (key, label), color in zip(CURVES, ("tab:green", "tab:red", "tab:orange", "tab:gray"), strict=True):
        ax[0].plot(x, [r[key] for r in rows], label=f"train {label}", color=color, lw=1)
        pts = [(e["agent_steps"] / 1e6, e["styles"]["normal"][label.replace("-", "")]) for e in evals
               if "normal" in e["styles"]]
        if pts:
            ax[0].plot(*zip(*pts, strict=True), "o", color=color, label=f"held-out {label} (normal)")
    ax[0].set(xlabel="controlled agent-steps (M)", ylabel="rate", ylim=(0, 1), title="episode outcomes")
    ax[1].plot(x, [r["episode_return"] for r in rows], lw=1)
    ax[1].set(xlabel="controlled agent-steps (M)", ylabel="return per agent-episode", title="training return")
    for at, name in starts:  # where a fine-tune continues the run before it
        for a in ax:
            a.axvline(at / 1e6, color="k", ls="--", lw=0.8)
        ax[0].text(at / 1e6, 0.97, f" {name}", fontsize=7, va="top")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def post_training(workdir: str, png: str) -> str:
    """Per-round diagnostics of a post-training run (metrics.jsonl, eval.jsonl) in one PNG: failures
    found by kind, retries passing the filter and verification by style, roots, distilled samples,
    validation outcomes vs budget spent, KL to the anchor, student-gate decisions; returns its path.
    Panels without data are left empty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
    evals_path = os.path.join(workdir, "eval.jsonl")
    evals = read_jsonl(evals_path) if os.path.exists(evals_path) else []
    x = [r["agent_steps"] / 1e6 for r in rows]
    fig, ax = plt.subplots(2, 4, figsize=(20, 7))
    ax = ax.ravel()
    for key, label in (("record_goal_rate", "goal"), ("record_timeout_rate", "timeout"),
                       ("record_collision_rate", "collision"), ("record_offroad_rate", "off-road"),
                       ("goal_rate", "goal (PPO)"), ("timeout_rate", "timeout (PPO)"),
                       ("collision_rate", "collision (PPO)")):
        if rows and key in rows[0]:
            ax[0].plot(x, [r[key] for r in rows], label=label, lw=1)
    ax[0].set(title="self-play outcomes (recorded episodes)", xlabel="budget spent (M agent-steps)", ylim=(0, 1))
    styles = [k.removeprefix("passed_") for k in (rows[0] if rows else {}) if k.startswith("passed_")]
    for s in styles:
        ax[1].plot(x, np.cumsum([r[f"passed_{s}"] for r in rows]), label=f"passed {s}", lw=1)
        ax[1].plot(x, np.cumsum([r[f"verified_{s}"] for r in rows]), "--", label=f"verified {s}", lw=1)
    ax[1].set(title="retries passing the filter / verification (cumulative)", xlabel="budget spent (M)")
    for key in ("picked_timeout", "picked_collision", "picked_offroad", "repaired"):
        if rows and key in rows[0]:
            ax[2].plot(x, np.cumsum([r[key] for r in rows]), label=key, lw=1)
    ax[2].set(title="failures picked by kind, repaired (cumulative)", xlabel="budget spent (M)")
    if rows and "root_back" in rows[0]:
        ax[3].plot(x, [r["root_back"] for r in rows], lw=1)
    ax[3].set(title="root: decisions back from the failure (mean)", xlabel="budget spent (M)")
    for key in ("distilled_samples", "samples"):
        if rows and key in rows[0]:
            ax[4].plot(x, np.cumsum([r[key] for r in rows]), label=key, lw=1)
    ax[4].set(title="training samples (cumulative)", xlabel="budget spent (M)")
    ex = [e["agent_steps"] / 1e6 for e in evals]
    for key in ("goal", "collision", "offroad", "timeout"):
        if evals:
            ax[5].plot(ex, [e[key] for e in evals], "o-", label=key, lw=1)
    ax[5].set(title="validation (greedy, deployment style)", xlabel="budget spent (M)", ylim=(0, 1))
    for key, label in (("anchor_kl", "recorded conditions"), ("deploy_kl", "deployment condition")):
        if rows and key in rows[0]:
            ax[6].plot(x, [r[key] for r in rows], label=label, lw=1)
    ax[6].set(title="KL(anchor || policy) on fresh self-play rows", xlabel="budget spent (M)")
    if rows and "gate_accepted" in rows[0]:
        ax[7].plot(x, np.cumsum([r["gate_accepted"] for r in rows]), label="accepted", lw=1)
        ax[7].plot(x, np.arange(1, len(rows) + 1), "--", label="rounds logged", lw=1)
    ax[7].set(title="student gate: updates kept (cumulative)", xlabel="budget spent (M)")
    for a in ax:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return png
