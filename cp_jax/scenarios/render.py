"""Render a Scenario (and optionally a state and trajectories) to PNG with matplotlib."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.patches import Polygon  # noqa: E402

from cp_jax.sim import types  # noqa: E402

ROAD_STYLE = {
    types.LANE: dict(color="#9bb7d4", lw=0.8, ls="--"),
    types.ROAD_EDGE: dict(color="#222222", lw=1.6, ls="-"),
    types.ROAD_LINE: dict(color="#d4b000", lw=0.8, ls="-"),
    types.CROSSWALK: dict(color="#888888", lw=0.8, ls=":"),
    types.STOP_SIGN: dict(color="#d62728", lw=3.0, ls="-"),
    types.SPEED_BUMP: dict(color="#8c564b", lw=1.0, ls="-"),
    types.DRIVEWAY: dict(color="#bbbbbb", lw=0.8, ls="-"),
}
CONTROLLER_COLOR = {
    types.POLICY: "#1f77b4",
    types.LOG: "#7f7f7f",
    types.CONST_VEL: "#9467bd",
    types.IDM: "#2ca02c",
    types.OTHER_POLICY: "#ff7f0e",
}


def corners(xy, yaw, size):
    """[4, 2] corners of one box (numpy)."""
    c, s = np.cos(yaw), np.sin(yaw)
    hl, hw = 0.5 * size[0], 0.5 * size[1]
    local = np.array([[hl, hw], [hl, -hw], [-hl, -hw], [-hl, hw]])
    return xy + local @ np.array([[c, s], [-s, c]])


def render(
    scenario: types.Scenario,
    path: str,
    state: types.SimState | None = None,
    paths: np.ndarray | None = None,
    title: str = "",
    show_lights_t: int | None = 0,
) -> str:
    """Draw road segments, agents as boxes (coloured by controller), goals as stars, and
    optional per-agent paths [A, N, 2]. Without a state, agents are drawn at log frame 0."""
    sc = to_numpy(scenario)
    fig, ax = plt.subplots(figsize=(8, 8), dpi=110)
    valid = sc["road_valid"]
    draw_road(ax, sc)
    if show_lights_t is not None and sc["tl_state"].any():
        t = min(show_lights_t, sc["tl_state"].shape[1] - 1)
        colour = {types.TL_STOP: "red", types.TL_CAUTION: "orange", types.TL_GO: "green"}
        for lane in np.flatnonzero(sc["tl_state"][:, t] > 0):
            first = np.flatnonzero(valid & (sc["road_lane"] == lane))
            if len(first):
                p = sc["road_xy0"][first[0]]
                ax.plot(*p, "o", color=colour.get(int(sc["tl_state"][lane, t]), "grey"), ms=5)

    if state is not None:
        st = {k: np.asarray(v) for k, v in state.__dict__.items()}
        xy, yaw, alive, ctrl = st["xy"], st["yaw"], st["alive"], st["controller"]
    else:
        xy, yaw = sc["log_xy"][:, 0], sc["log_yaw"][:, 0]
        alive = sc["agent_valid"] & sc["log_valid"][:, 0]
        ctrl = np.where(sc["controllable"], types.POLICY, types.LOG)
    for i in np.flatnonzero(sc["agent_valid"]):
        colour = CONTROLLER_COLOR.get(int(ctrl[i]), "black")
        if paths is not None:
            ax.plot(paths[i, :, 0], paths[i, :, 1], "-", color=colour, lw=0.8, alpha=0.7)
        if alive[i]:
            ax.add_patch(
                Polygon(corners(xy[i], yaw[i], sc["size"][i]), closed=True, fc=colour, ec="black", lw=0.5, alpha=0.85)
            )
        if sc["controllable"][i] and np.linalg.norm(sc["goal"][i] - sc["log_xy"][i, 0]) > 0.1:
            ax.plot(*sc["goal"][i], "*", color=colour, ms=7, mec="black", mew=0.3)
    pts = np.concatenate([sc["road_xy0"][valid], sc["road_xy1"][valid]])
    lo, hi = pts.min(0) - 5, pts.max(0) + 5
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_road(ax, sc: dict) -> None:
    """Road segments of a numpy scenario dict (`to_numpy`) onto matplotlib axes, styled by type."""
    valid = sc["road_valid"]
    for kind, style in ROAD_STYLE.items():
        m = valid & (sc["road_type"] == kind)
        if m.any():
            segs = np.stack([sc["road_xy0"][m], sc["road_xy1"][m]], 1)
            ax.add_collection(
                LineCollection(segs, colors=style["color"], linewidths=style["lw"], linestyles=style["ls"])
            )


def to_numpy(scenario):
    return {k: np.asarray(v) for k, v in scenario.__dict__.items()}
