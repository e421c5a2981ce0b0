"""Figures written by runs: the learning curve of a training run."""

from __future__ import annotations

import os

from cp_jax.io.metrics import read_jsonl

CURVES = (("goal_rate", "goal"), ("collision_rate", "collision"), ("offroad_rate", "off-road"),
          ("timeout_rate", "timeout"))


def learning_curve(workdir: str, png: str) -> str:
    """Training outcome rates vs agent-steps (metrics.jsonl) and held-out normal-style rates
    (eval.jsonl, markers) in one PNG; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r.get("goal_rate") is not None]
    evals_path = os.path.join(workdir, "eval.jsonl")
    evals = read_jsonl(evals_path) if os.path.exists(evals_path) else []
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    x = [r["agent_steps"] / 1e6 for r in rows]
    for (key, label), color in zip(CURVES, ("tab:green", "tab:red", "tab:orange", "tab:gray"), strict=True):
        ax[0].plot(x, [r[key] for r in rows], label=f"train {label}", color=color, lw=1)
        pts = [(e["agent_steps"] / 1e6, e["styles"]["normal"][label.replace("-", "")]) for e in evals
               if "normal" in e["styles"]]
        if pts:
            ax[0].plot(*zip(*pts, strict=True), "o", color=color, label=f"held-out {label} (normal)")
    ax[0].set(xlabel="controlled agent-steps (M)", ylabel="rate", ylim=(0, 1), title="episode outcomes")
    ax[0].legend(fontsize=7)
    ax[1].plot(x, [r["episode_return"] for r in rows], lw=1)
    ax[1].set(xlabel="controlled agent-steps (M)", ylabel="return per agent-episode", title="training return")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png
