"""Fig.-3-style pictures of benchmark episodes: policies side by side on the same pair.

Each panel (all panels share one view): the road; every other agent's path (grey, thin) and final box; the ego's path as
points coloured by time; the ego's start box; its goal (star); and a marker where its episode
ended: collision (red cross), off-road (triangle), timeout (circle) or goal (none). `animate` plays the
same episodes as a GIF: every agent's box while it is in the world, the ego's (blue) path so far.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Polygon  # noqa: E402
from PIL import Image  # noqa: E402

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
    _, marker = _ending(rec, ego)
    if marker:
        ax.plot(*(path[-1] if len(path) else xy[0, ego]), zorder=5, **marker)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=6)


def _ending(rec: dict, ego: int) -> tuple[int, dict]:
    """(row of the ego's first event, INF_T for none; the plot kwargs of the marker where its episode ended,
    {} for a goal): collision red cross, off-road triangle, timeout circle."""
    t_c, t_o, t_g = int(rec["first_collision_t"][ego]), int(rec["first_offroad_t"][ego]), int(rec["goal_t"][ego])
    first = min(t_c, t_o, t_g)
    if first == INF_T:
        return first, dict(marker="o", mfc="none", mec="black", ms=12, mew=1.5)
    if t_c == first:
        return first, dict(marker="x", color="red", ms=12, mew=2.5)
    if t_o == first:
        return first, dict(marker="^", color="darkorange", ms=11, mec="black")
    return first, {}


def _view(sc: dict, records: list[dict], ego: int) -> tuple[np.ndarray, float]:
    """(centre [2], half width) of the one square view every panel shares: the ego's goal and every
    record's ego path, with a 25 m margin."""
    pts = np.concatenate([sc["goal"][ego][None]] + [r["xy"][r["alive"][:, ego] | (np.arange(len(r["xy"])) == 0), ego]
                                                  for r in records])
    lo, hi = pts.min(0) - 25, pts.max(0) + 25
    return 0.5 * (lo + hi), 0.5 * max(hi - lo)


def side_by_side(path, scenario, records: list[dict], ego: int, titles: list[str], suptitle: str = "",
                 dpi: int = 110):
    """One panel per record (numpy dicts of an EpisodeRecord for one pair) on the same scenario, as a PNG
    to path (a file name or a binary file); returns path."""
    sc = render.to_numpy(scenario)
    fig, axes = plt.subplots(1, len(records), figsize=(5.5 * len(records), 5.5), dpi=dpi, squeeze=False)
    mid, half = _view(sc, records, ego)
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


def animate(path, scenario, records: list[dict], ego: int, titles: list[str], frames: int = 40):
    """`side_by_side`'s panels as a GIF to path (a file name or a binary file), about 220 x 240 px per
    panel, 0.15 s a frame: `frames` states evenly spaced over the episode, each agent's box while it is in
    the world (the ego's blue), the ego's path so far, its goal, and its ending marker from its event on
    (the last frame for a timeout). Returns path."""
    sc = render.to_numpy(scenario)
    mid, half = _view(sc, records, ego)
    fig, axes = plt.subplots(1, len(records), figsize=(2.2 * len(records), 2.4), dpi=100, squeeze=False)
    panels = []
    for ax, rec, title in zip(axes[0], records, titles, strict=True):
        render.draw_road(ax, sc)
        ax.plot(*sc["goal"][ego], "*", color="gold", ms=9, mec="black", mew=0.5, zorder=4)
        boxes = {j: ax.add_patch(Polygon(np.zeros((4, 2)), closed=True, fc="#1f77b4" if j == ego else "#c7c7c7",
                                         ec="black", lw=0.4, zorder=3 + (j == ego)))
                 for j in np.flatnonzero(sc["agent_valid"])}
        (trail,) = ax.plot([], [], "-", color="#1f77b4", lw=1.5, zorder=3)
        first, marker = _ending(rec, ego)
        (end,) = ax.plot([], [], zorder=5, **(marker or dict(marker="")))
        ax.set(xlim=(mid[0] - half, mid[0] + half), ylim=(mid[1] - half, mid[1] + half), aspect="equal",
               xticks=[], yticks=[])
        ax.set_title(title, fontsize=8)
        panels.append((rec, boxes, trail, end, min(first, len(rec["xy"]) - 1)))
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    images = []
    for t in np.linspace(0, len(records[0]["xy"]) - 1, frames).round().astype(int):
        for rec, boxes, trail, end, last in panels:
            for j, box in boxes.items():
                box.set_visible(bool(rec["alive"][t, j]))
                box.set_xy(render.corners(rec["xy"][t, j], rec["yaw"][t, j], sc["size"][j]))
            seen = rec["xy"][: t + 1][rec["alive"][: t + 1, ego], ego]
            trail.set_data(seen[:, 0], seen[:, 1])
            end.set_data(seen[-1:, 0] if t >= last else [], seen[-1:, 1] if t >= last else [])
        fig.suptitle(f"step {t}", fontsize=7, y=0.99)
        fig.canvas.draw()
        images.append(Image.fromarray(np.asarray(fig.canvas.buffer_rgba())[..., :3]))
    plt.close(fig)
    both = Image.new("RGB", (images[0].width, 2 * images[0].height))  # the palette sees the start and the ends
    both.paste(images[0], (0, 0))
    both.paste(images[-1], (0, images[0].height))
    palette = both.quantize(64)
    frames_p = [im.quantize(palette=palette) for im in images]
    frames_p[0].save(path, format="GIF", save_all=True, append_images=frames_p[1:], duration=150, loop=0)
    return path
