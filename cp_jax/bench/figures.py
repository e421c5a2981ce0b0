"""Fig.-3-style pictures of benchmark episodes: policies side by side on the same pair.

Each panel (all panels share one view): the road; every other agent's path (grey, thin) and final box; the ego's path as
points coloured by time; the ego's start box; its goal (star); and a marker where its episode
ended: collision (red cross), off-road (triangle), timeout (circle) or goal (green star edge).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Polygon  # noqa: E402

from cp_jax.scenarios import render  # noqa: E402
from cp_jax.sim.types import INF_T  # noqa: E402


def _panel(ax, sc: dict, rec: dict, ego: int, title: str) -> None:
    render.draw_road(ax, sc)
    xy, alive, yaw = rec["xy"], rec["alive"], rec["yaw"]
    for j in np.flatnonzero(sc["agent_valid"]):
        if j == ego:
            continue
        path = xy[alive[:, j], j]
        if len(path):
            ax.plot(path[:, 0], path[:, 1], "-", color="#7f7f7f", lw=0.7, alpha=0.8)
            last = np.flatnonzero(alive[:, j])[-1]
            ax.add_patch(Polygon(render.corners(xy[last, j], yaw[last, j], sc["size"][j]), closed=True,
                                 fc="#c7c7c7", ec="black", lw=0.4))
    steps = np.flatnonzero(alive[:, ego])
    path = xy[steps, ego]
    ax.add_patch(Polygon(render.corners(xy[0, ego], yaw[0, ego], sc["size"][ego]), closed=True,
                         fc="none", ec="#1f77b4", lw=1.2))
    ax.scatter(path[:, 0], path[:, 1], c=steps, cmap="viridis", s=6, zorder=3)
    ax.plot(*sc["goal"][ego], "*", color="gold", ms=14, mec="black", mew=0.6, zorder=4)
    end = path[-1] if len(path) else xy[0, ego]
    t_c, t_o, t_g = int(rec["first_collision_t"][ego]), int(rec["first_offroad_t"][ego]), int(rec["goal_t"][ego])
    first = min(t_c, t_o, t_g)
    if first == INF_T:
        ax.plot(*end, "o", mfc="none", mec="black", ms=12, mew=1.5, zorder=5)
    elif t_c == first:
        ax.plot(*end, "x", color="red", ms=12, mew=2.5, zorder=5)
    elif t_o == first:
        ax.plot(*end, "^", color="darkorange", ms=11, mec="black", zorder=5)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=6)


def side_by_side(path: str, scenario, records: list[dict], ego: int, titles: list[str], suptitle: str = "") -> str:
    """One panel per record (numpy dicts of an EpisodeRecord for one pair) on the same scenario."""
    sc = render.to_numpy(scenario)
    fig, axes = plt.subplots(1, len(records), figsize=(5.5 * len(records), 5.5), dpi=110, squeeze=False)
    # One view for every panel: the start, the goal and every panel's ego path, with a margin.
    pts = np.concatenate([sc["goal"][ego][None]] + [r["xy"][r["alive"][:, ego] | (np.arange(len(r["xy"])) == 0), ego]
                                                  for r in records])
    lo, hi = pts.min(0) - 25, pts.max(0) + 25
    half, mid = 0.5 * max(hi - lo), 0.5 * (lo + hi)
    for ax, rec, title in zip(axes[0], records, titles, strict=True):
        _panel(ax, sc, rec, ego, title)
        ax.set_xlim(mid[0] - half, mid[0] + half)
        ax.set_ylim(mid[1] - half, mid[1] + half)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
