"""How far the observed road reaches: the radius covered by the `obs_road` road segments an agent
sees (the ones nearest its grid cell's centre), at the controllable agents' logged positions.

    python benchmarks/road_view.py [--policy=assets/anchors/conditioned_small] [--obs_road=64]

Held-out procedural scenes (28, seeds 100000-100027, 12 agents) with the policy's SimConfig (and
--obs_road / --grid_size if given), every 10th logged step of every controllable agent. Prints the
10th / 50th / 90th percentile of the distance to the farthest observed segment midpoint (a cell whose
list is not full counts as unbounded) and of the all-seen radius (every midpoint nearer is observed),
the latter also for the segments nearest the agent itself, the share of those the cell's list holds,
the segments per scene, and what the slots hold by road type.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import numpy as np

from cp_jax.policy import saved
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import geometry, types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small", help="whose SimConfig to use")
    ap.add_argument("--obs_road", type=int, default=0, help="override SimConfig.obs_road (0: the policy's)")
    ap.add_argument("--grid_size", type=int, default=0, help="override SimConfig.grid_size (0: the policy's)")
    ap.add_argument("--scenes", type=int, default=28)
    ap.add_argument("--seed", type=int, default=100_000)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes")
    args = ap.parse_args()

    sim = saved.load(args.policy).sim
    if args.obs_road:
        sim = dataclasses.replace(sim, obs_road=args.obs_road)
    if args.grid_size:
        sim = dataclasses.replace(sim, grid_size=args.grid_size)
    _, bank = bank_lib.cached_procedural_bank(args.cache_dir, args.scenes, args.seed, args.agents, sim)
    sc = jax.tree.map(np.asarray, bank)
    radius, kinds = [], np.zeros(len(types.ROAD_TYPES))
    overlap, seen_cell, seen_exact = [], [], []  # against the obs_road segments nearest the agent itself
    for b in range(args.scenes):
        pts = sc.log_xy[b][sc.controllable[b]][:, ::10].reshape(-1, 2).astype(np.float32)
        cells = np.asarray(geometry.cell_of(pts, sc.grid_origin[b], sc.grid_cell[b], sim.grid_size))
        mids = np.where(sc.road_valid[b][:, None], sc.road_feat[b, :, :2], np.inf)
        for p, c in zip(pts, cells, strict=True):
            ids = sc.cell_road[b, c]
            ids = ids[ids >= 0]
            full = len(ids) == sim.obs_road
            radius.append(np.hypot(*(sc.road_feat[b, ids, :2] - p).T).max() if full else np.inf)
            kinds += np.bincount(sc.road_type[b, ids], minlength=len(types.ROAD_TYPES))
            d = np.hypot(*(mids - p).T)
            order = np.argsort(d)
            overlap.append(len(set(ids.tolist()) & set(order[:sim.obs_road].tolist())) / sim.obs_road)
            unseen = np.ones(len(d), bool)
            unseen[ids] = False
            seen_cell.append(d[unseen].min())  # everything nearer than this is observed
            seen_exact.append(d[order[sim.obs_road]])
    pct = lambda x: [round(float(v), 1) for v in np.percentile(np.asarray(x), [10, 50, 90])]  # noqa: E731
    share = {name: round(float(k / kinds.sum()), 3) for name, k in zip(types.ROAD_TYPES, kinds, strict=True) if k}
    out = dict(obs_road=sim.obs_road, grid_size=sim.grid_size, cell_m=round(float(sc.grid_cell.mean()), 1),
               radius_m_p10_p50_p90=pct(radius), all_seen_radius_m_p10_p50_p90=pct(seen_cell),
               all_seen_radius_if_nearest_to_agent=pct(seen_exact),
               overlap_with_nearest_to_agent=round(float(np.mean(overlap)), 3),
               segments_per_scene=round(float(sc.road_valid.sum(1).mean()), 1), slot_share_by_type=share,
               positions=len(radius))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
