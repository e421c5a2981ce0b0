"""Does a benchmark ego enter junctions on red? Red-light entries on the signalised pairs of the
procedural Interactive split, and the outcomes of pairs with and without one.

    python benchmarks/red_lights.py --policy=assets/anchors/conditioned_small [--regime=expert] [--ego=idm]

The benchmark's episodes (cp_jax.bench.episodes: 60 scenes from seed 300000, 200 Interactive pairs,
normal ego style, greedy ego, seed 0), one regime. For every pair whose scene has a traffic light, the
ego's lane each step is the lane segment nearest its centre (preferring lanes along its heading, as
the reward's lane frame does); an entry on red is a step at which that lane changes to one whose light
shows stop, within 4 m of where that lane starts (its stop line), while the ego moves faster than 0.5 m/s.
The observation has no traffic lights (STATUS.md, known limits): this measures what it
costs. --ego=idm runs the IDM ego instead
(it stops for lights: the check of the measurement). --json prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from cp_jax.bench import episodes, suite
from cp_jax.policy import saved
from cp_jax.sim import conditions, types

START_RADIUS = 4.0  # m: a lane is entered where it starts (else the nearest lane only changed mid-junction)


def red_entries(rec, bank, scene: int, p: int, ego: int) -> int:
    """Entries on red of the ego of pair p (record rows [P, T1, ...]) in scene `scene` of bank."""
    lane_seg = (bank.road_type[scene] == types.LANE) & bank.road_valid[scene]
    a, b, lane_id = bank.road_xy0[scene][lane_seg], bank.road_xy1[scene][lane_seg], bank.road_lane[scene][lane_seg]
    d = b - a
    length2 = np.maximum((d * d).sum(-1), 1e-9)
    tl = bank.tl_state[scene]
    first = {}  # lane id -> its first point (the stop line of a junction lane)
    for i in np.flatnonzero(lane_seg)[::-1]:
        first[int(bank.road_lane[scene][i])] = bank.road_xy0[scene][i]
    prev, count = -1, 0
    for t in range(rec.xy.shape[1]):
        if not rec.alive[p, t, ego]:
            break
        x, yaw = rec.xy[p, t, ego], rec.yaw[p, t, ego]
        u = np.clip(((x - a) * d).sum(-1) / length2, 0.0, 1.0)
        dist = np.linalg.norm(x - (a + u[:, None] * d), axis=-1)
        cos = (d[:, 0] * np.cos(yaw) + d[:, 1] * np.sin(yaw)) / np.sqrt(length2)
        lane = int(lane_id[np.argmin(dist + 2.0 * (1.0 - cos))])
        on_red = tl[lane, min(t, tl.shape[1] - 1)] == types.TL_STOP
        at_start = np.linalg.norm(x - first[lane]) < START_RADIUS
        count += int(prev >= 0 and lane != prev and at_start and on_red and rec.speed[p, t, ego] > 0.5)
        prev = lane
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small", help="the ego (its SimConfig is used)")
    ap.add_argument("--ego", default="", help="'idm': the IDM ego instead of --policy")
    ap.add_argument("--regime", default="expert", choices=("idm", "expert"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    pol = saved.load(args.policy)
    ego = episodes.builtin("idm") if args.ego == "idm" else episodes.from_saved("ego", pol)
    st = suite.procedural_suite(60, 200, pol.sim)
    cfg = episodes.bench_config(st.cfg, ego)
    sp = st.splits["interactive"]
    ep = episodes.run(ego, args.regime, {}, st.bank, sp.scene, sp.ego, conditions.style("normal"), 0, cfg)
    rec, bank = jax.device_get(ep.record), jax.device_get(st.bank)
    rows = []
    for p, (s, e) in enumerate(zip(sp.scene, sp.ego, strict=True)):
        if (bank.tl_state[s] != types.TL_NONE).any():
            rows.append((red_entries(rec, bank, int(s), p, int(e)) > 0,
                         *(float(ep.metrics[k][p]) for k in ("goal", "collision", "at_fault"))))
    r = np.array(rows, np.float64).reshape(-1, 4)
    out = dict(ego=args.ego or args.policy, regime=args.regime, pairs=len(sp.scene), signalised=len(r),
               entered_on_red=int(r[:, 0].sum()))
    for flag, name in ((1, "with_red_entry"), (0, "without")):
        m = r[:, 0] == flag
        out[name] = {k: float(r[m, i].mean()) if m.any() else None
                     for i, k in ((1, "goal"), (2, "collision"), (3, "at_fault"))} | {"pairs": int(m.sum())}
    print(f"{out['ego']} ego, {args.regime} traffic: {out['signalised']} of {out['pairs']} Interactive pairs "
          f"signalised, the ego entered a lane on red in {out['entered_on_red']}")
    for name in ("with_red_entry", "without"):
        o = out[name]
        if o["pairs"]:
            print(f"  {name:15s} {o['pairs']:3d} pairs  goal {o['goal']:.2f}  collision {o['collision']:.2f}  "
                  f"at fault {o['at_fault']:.2f}")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
