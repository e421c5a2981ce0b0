"""Why a self-play policy fails on the held-out procedural scenes: collision geometry, reversing,
and how timeouts end.

    python benchmarks/failure_analysis.py --policy=assets/anchors/conditioned_small [--style=normal]

One greedy self-play episode per held-out scene (the training driver's held-out split: 28 scenes,
seeds 100000-100027, 12 agents), every controllable agent driven by the policy under --style.
Prints the outcome rates (overall and per layout kind); each collision pair (crossing / same
direction / head-on by relative heading, both speeds, the partner policy-driven or log-replayed);
the share of agents and alive steps with negative speed, by outcome; and for each timeout its
distance to the goal at the start / closest / end and its mean speed. --json prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from cp_jax.policy import distributions as dist
from cp_jax.policy import saved
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import conditions, env, metrics, types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small")
    ap.add_argument("--style", default="normal")
    ap.add_argument("--scenes", type=int, default=28)
    ap.add_argument("--seed", type=int, default=100_000)
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    pol = saved.load(args.policy)
    sim, params = pol.sim, types.default_params()
    names, bank = bank_lib.cached_procedural_bank(args.cache_dir, args.scenes, args.seed, 12, sim)
    cond = conditions.style(args.style)

    def act(p, obs, s, key):
        return dist.greedy(pol.net.apply(p, obs, None)[0])

    def episode(scenario, key):
        s0 = env.reset(scenario, key, cond, sim)
        final, traj = env.rollout(act, pol.params, s0, scenario, params, sim, sim.episode_steps, keep_states=True)
        return final, (traj.state.xy, traj.state.yaw, traj.state.speed, traj.state.alive)

    n = len(names)
    final, (xy, yaw, speed, alive) = jax.device_get(
        jax.jit(jax.vmap(episode))(bank, jax.random.split(jax.random.PRNGKey(0), n)))
    ctrl = np.asarray(bank.controllable)
    out = {k: np.asarray(v) & ctrl for k, v in jax.device_get(metrics.outcomes(final)).items()}
    rates = {k: float(v.sum() / ctrl.sum()) for k, v in out.items()}
    print(f"{args.policy} under {args.style}: {int(ctrl.sum())} agents, " +
          ", ".join(f"{k} {v:.3f}" for k, v in rates.items()))
    by_layout = {}  # outcome rates per layout kind (scene names are KIND_SEED)
    layout = np.array([n.rsplit("_", 1)[0] for n in names])
    for kind in dict.fromkeys(layout):
        rows = layout == kind
        agents = int(ctrl[rows].sum())
        by_layout[kind] = dict(agents=agents, **{k: float(v[rows].sum() / max(agents, 1)) for k, v in out.items()})
    print("by layout:")
    for kind, r in by_layout.items():
        print(f"  {kind:15s} {r['agents']:4d} agents  " + ", ".join(f"{k} {r[k]:.2f}" for k in out))

    pairs = []
    for s, a in zip(*np.nonzero(out["collision"]), strict=True):
        j, t = int(final.collision_partner[s, a]), int(final.first_collision_t[s, a]) - 1
        if ctrl[s, j] and j < a:
            continue  # each policy-policy pair once
        dyaw = float(np.degrees(np.angle(np.exp(1j * (yaw[s, t, a] - yaw[s, t, j])))))
        kind = "same direction" if abs(dyaw) < 30 else ("head-on" if abs(dyaw) > 150 else "crossing")
        pairs.append(dict(scene=names[s], t=t, kind=kind, dyaw=round(dyaw), speeds=(float(speed[s, t, a]),
                          float(speed[s, t, j])), partner="policy" if ctrl[s, j] else "log"))
    print("collisions:")
    for p in pairs:
        print(f"  {p['scene']:22s} t={p['t']:3d} {p['kind']:14s} dyaw={p['dyaw']:5d} speeds="
              f"({p['speeds'][0]:5.1f}, {p['speeds'][1]:5.1f}) partner {p['partner']}")
    kinds = {k: sum(p["kind"] == k for p in pairs) for k in ("crossing", "same direction", "head-on")}
    partners = {k: sum(p["partner"] == k for p in pairs) for k in ("policy", "log")}
    print(f"  pairs by kind {kinds}, by partner {partners}")

    live = alive & ctrl[:, None, :]
    backwards = (speed < -0.05) & live
    reversed_by_outcome = {k: [int((backwards.any(1) & v).sum()), int(v.sum())] for k, v in out.items()}
    print(f"reversing: {float(backwards.sum() / live.sum()):.3f} of alive steps, "
          f"{float(backwards.any(1)[ctrl].mean()):.3f} of agents; (reversed, all) by outcome {reversed_by_outcome}")

    timeouts = []
    goal = np.asarray(bank.goal)
    for s, a in zip(*np.nonzero(out["timeout"]), strict=True):
        d = np.linalg.norm(xy[s, :, a] - goal[s, a], axis=-1)[live[s, :, a]]
        timeouts.append(dict(scene=names[s], start=float(d[0]), closest=float(d.min()), end=float(d[-1]),
                             mean_speed=float(speed[s, live[s, :, a], a].mean())))
    print("timeouts (distance to goal m: start / closest / end, mean speed m/s):")
    for t in timeouts:
        print(f"  {t['scene']:22s} {t['start']:5.1f} / {t['closest']:5.1f} / {t['end']:5.1f}  {t['mean_speed']:5.1f}")
    slow = sum(t["mean_speed"] < 2.5 for t in timeouts)
    print(f"  {slow} of {len(timeouts)} timeouts averaged under 2.5 m/s")
    if args.json:
        print(json.dumps(dict(rates=rates, by_layout=by_layout, collision_kinds=kinds, collision_partners=partners,
                              reversed_by_outcome=reversed_by_outcome, slow_timeouts=slow, timeouts=len(timeouts))))


if __name__ == "__main__":
    main()
