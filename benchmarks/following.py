"""Car following at speed, isolated: does a policy brake for a slower car ahead in its lane?

    python benchmarks/following.py --policy=assets/anchors/conditioned_small --policy=idm

Issue #31's real-scene at-fault collisions are rear-end ones at 10-20 m/s (benchmarks/real_gap.py). This
probe asks the same question without a real scene's other causes: a straight one-way road of three
3.7 m lanes, the ego in the middle lane behind a leader that replays a log (non-reactive), over a grid
of leader speed (6 / 10 / 14 m/s), the ego's start speed above it (+0 / +3 / +6 m/s), the bumper gap
(10 / 20 / 35 m), the leader either cruising or braking at 3 m/s^2 to half its speed from t = 1 s, and
the neighbouring lanes empty or holding cars at the leader's speed every 20 m (3 x 3 x 3 x 2 x 2 = 108
episodes). The ego's goal lies where following the leader at its speed for 8.5 s ends, in its lane, and
at least 5 m behind the leader's final position, so the task is to follow. Harder variants of what real
scenes show (a leader off the lane's centreline, braking from the first step, harder): `--offset=0.9
--brake_at=0 --brake=4`. Per policy (greedy, normal
style, Expert traffic): the share of episodes with an at-fault collision, overall and by each factor,
and the completed share.
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np

from cp_jax.bench import episodes
from cp_jax.scenarios import bank as bank_lib
from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import conditions, types

LANE_W, LENGTH, STEPS, DT = 3.7, 600.0, 91, 0.1
EGO_X = 40.0
CAR = (4.5, 2.0)  # length, width (m)
LEAD_V, EXTRA_V, GAPS = (6.0, 10.0, 14.0), (0.0, 3.0, 6.0), (10.0, 20.0, 35.0)
GOAL_BEHIND = 5.0  # m: the ego's goal is at least this far behind the leader's final rear bumper
BRAKE_AT, BRAKE = 1.0, 3.0  # s, m/s^2: by default a braking leader slows to half its speed from 1 s at 3 m/s^2


def _track(x0: float, v0: float, brake: bool, brake_at: float = BRAKE_AT,
           decel: float = BRAKE) -> tuple[np.ndarray, np.ndarray]:
    """x [STEPS] and speed [STEPS] of a car starting at x0, v0, cruising or braking to v0 / 2 from
    brake_at (s) at decel (m/s^2)."""
    t = np.arange(STEPS) * DT
    v = v0 - decel * np.clip(t - brake_at, 0.0, 0.5 * v0 / decel) if brake else np.full(STEPS, v0)
    x = x0 + np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * DT)])
    return x, v


def scene(lead_v: float, extra_v: float, gap: float, brake: bool, side: bool, offset: float = 0.0,
          brake_at: float = BRAKE_AT, decel: float = BRAKE) -> RawScene:
    """One episode of the grid: agent 0 is the ego, agent 1 its leader (`offset` m left of the lane's
    centreline), the rest side traffic."""
    ys = (-LANE_W, 0.0, LANE_W)
    xs = np.linspace(0.0, LENGTH, 121)
    lanes = [np.stack([xs, np.full_like(xs, y)], -1) for y in ys]
    half = 1.5 * LANE_W + 1.0
    edges = [np.stack([xs, np.full_like(xs, -half)], -1), np.stack([xs[::-1], np.full_like(xs, half)], -1)]
    lines = [(types.ROAD_LINE, np.array([[0.0, y], [LENGTH, y]])) for y in (-0.5 * LANE_W, 0.5 * LANE_W)]
    cars = [(EGO_X, 0.0, lead_v + extra_v, False), (EGO_X + CAR[0] + gap, offset, lead_v, brake)]
    if side:
        cars += [(x, y, lead_v, False) for y in (ys[0], ys[2]) for x in np.arange(EGO_X - 20.0, EGO_X + 80.0, 20.0)]
    n = len(cars)
    log_x, log_v = zip(*(_track(x, v, b, brake_at, decel) for x, _, v, b in cars), strict=True)
    log_xy = np.stack([np.stack([x, np.full(STEPS, c[1])], -1) for x, c in zip(log_x, cars, strict=True)])
    log_vel = np.stack([np.stack([v, np.zeros(STEPS)], -1) for v in log_v])
    ego_goal = min(EGO_X + lead_v * 8.5, log_x[1][-1] - CAR[0] - GOAL_BEHIND)  # short of where the leader stops
    goal = np.array([[ego_goal, 0.0]] + [[x[-1], c[1]] for x, c in zip(log_x[1:], cars[1:], strict=True)])
    lane_of = {y: i for i, y in enumerate(ys)}
    return RawScene(
        name=f"follow_v{lead_v:g}+{extra_v:g}_g{gap:g}_{'brake' if brake else 'cruise'}_{'side' if side else 'free'}",
        lanes=lanes, lane_succ=[[], [], []], lane_left=[1, 2, -1], lane_right=[-1, 0, 1], edges=edges,
        others=lines, log_xy=log_xy, log_yaw=np.zeros((n, STEPS)), log_vel=log_vel,
        log_valid=np.ones((n, STEPS), bool), size=np.tile([CAR], (n, 1)), obj_type=np.zeros(n, np.int32),
        goal=goal, controllable=np.ones(n, bool), routes=[[lane_of.get(c[1], 1)] for c in cars],
    )


GRID = list(itertools.product(LEAD_V, EXTRA_V, GAPS, (False, True), (False, True)))
FACTORS = dict(lead_speed=0, ego_faster_by=1, gap=2, leader_brakes=3, side_traffic=4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", default=[], help="a policy folder or a built-in ego (idm); repeat")
    ap.add_argument("--offset", type=float, default=0.0, help="the leader's offset left of its lane's centreline (m)")
    ap.add_argument("--brake_at", type=float, default=BRAKE_AT, help="when a braking leader starts braking (s)")
    ap.add_argument("--brake", type=float, default=BRAKE, help="how hard a braking leader brakes (m/s^2)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not (abs(a.offset) < 0.5 * LANE_W and a.brake_at >= 0.0 and a.brake > 0.0):
        ap.error(f"--offset must be within half a lane ({0.5 * LANE_W} m), --brake_at >= 0 and --brake > 0")
    drivers = [episodes.from_spec(p) for p in a.policy or ["assets/anchors/conditioned_small"]]
    base = types.SimConfig(max_agents=16, max_road_segments=1024, max_lanes=8, max_route_points=320,
                           log_steps=STEPS, episode_steps=STEPS - 1, obs_road=64)
    cfg = episodes.bench_config(base, *drivers)
    bank = bank_lib.make_bank([scene(*g, a.offset, a.brake_at, a.brake) for g in GRID], cfg)
    index = np.arange(len(GRID))
    grid = np.array([[float(x) for x in g] for g in GRID])
    out = {}
    for d in drivers:
        m = episodes.run(d, "expert", {}, bank, index, np.zeros_like(index), conditions.STYLES["normal"], 0,
                         cfg).metrics
        fault = m["at_fault"] > 0
        row = dict(at_fault=round(100 * float(fault.mean()), 1), completed=round(100 * float(m["goal"].mean()), 1),
                   offroad=round(100 * float(m["offroad"].mean()), 1), by={})
        for name, col in FACTORS.items():
            row["by"][name] = {f"{v:g}": round(100 * float(fault[grid[:, col] == v].mean()), 1)
                               for v in np.unique(grid[:, col])}
        out[d.name] = row
        print(f"{d.name:24s} at fault {row['at_fault']:5.1f}%  completed {row['completed']:5.1f}%  "
              f"off-road {row['offroad']:5.1f}%  ({len(GRID)} episodes)")
        for name, vals in row["by"].items():
            print(f"    at fault by {name:14s} " + "  ".join(f"{k}: {v:5.1f}" for k, v in vals.items()))
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
