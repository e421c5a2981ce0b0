"""Why a policy trained on procedural roads fails on real ones: an ablation ladder and the failures by
scene statistic, on a converted real scene cache (issue #31's diagnosis).

    python benchmarks/real_gap.py --policy=assets/anchors/conditioned_small --scenes=runs/real_val \
        --regimes=expert,idm --json

Every pair of the cache's split manifest (--split; make_splits with --n above the pair count puts
every eligible pair in both splits), the policy ego greedy under the normal style, one seed.
Ladder rows (completed / off-road / at fault % and pairs):
- `road view as built`: the policy observes every road entry the cache stores per cell (128 for
  launch.build_scenes: the benchmark before issue #31), all pairs;
- `road view as trained`: cut to the policy's obs_road, all pairs;
- `drivable pairs`: and the pairs whose logged ego starts off the road or leaves it set apart
  (cp_jax.bench.suite.drivable): the honest comparison the benchmark now makes;
- the IDM ego on the drivable pairs (a route along its logged path where the lane graph has none).
Then, on the drivable pairs, the policy's off-road and at-fault rates by bucket of the start
statistics it depends on (cp_jax.scenarios.stats: start offset, heading error, speed, edge clearance,
density, path curvature): which conditions its failures concentrate in. Last, how its failures happen:
each at-fault collision by the classifier rule that decided it (cp_jax.bench.metrics.fault_rule: a
stopped partner, a pedestrian / cyclist, running into a moving partner ahead, contact while changing lanes)
with the ego's and the partner's speeds and how hard each braked in the second before contact; each
off-road exit's speed and the net heading change from the start to it; and the share of failures from
the scene with the most pairs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.bench import episodes, suite
from cp_jax.bench import metrics as bench_metrics
from cp_jax.scenarios import stats as stats_lib
from cp_jax.sim import conditions, env

BRAKE_WINDOW = 10  # steps (1 s) before a collision over which the ego's and the partner's slowing is measured
BUCKETS = dict(start_offset=(0.5, 1.0), start_heading_error=(3.0, 10.0), start_speed=(8.0, 15.0),
               edge_clearance=(0.5, 1.5), density=(5.0, 15.0), path_curvature=(0.5, 2.0))


def rates(m: dict, keep: np.ndarray | None = None) -> dict:
    keep = np.ones(len(m["goal"]), bool) if keep is None else keep
    n = int(keep.sum())
    pct = lambda k: round(100.0 * float(np.mean(m[k][keep])), 1) if n else float("nan")  # noqa: E731
    return dict(pairs=n, completed=pct("goal"), offroad=pct("offroad"), at_fault=pct("at_fault"),
                timeout=pct("timeout"))


def how_they_fail(run: episodes.Episodes, bank, scene: np.ndarray, ego: np.ndarray, cfg) -> dict:
    """The failures of one run of pairs (scene [P], ego [P]): at-fault collisions by deciding rule with
    the median ego / partner speed (m/s) at contact, off-road exits with the median exit speed and net
    heading change from the start (deg), and the share of each failure from the scene with the most
    pairs. run.record holds [P, T + 1, A] rows."""
    m = run.metrics

    def features(rec, s, e, bank):
        return bench_metrics.collision_features(rec, env.take_scenario(bank, s), e, cfg)

    f = jax.jit(jax.vmap(features, in_axes=(0, 0, 0, None)))(
        run.record, jnp.asarray(scene, jnp.int32), jnp.asarray(ego, jnp.int32), bank)
    number, changing = (np.asarray(x) for x in jax.vmap(bench_metrics.fault_rule)(f))
    f = {k: np.asarray(v) for k, v in f.items()}
    names = np.asarray(bench_metrics.RULES)[number]
    rule = np.where(changing & np.isin(number, bench_metrics.AT_FAULT_IF_CHANGING), "changing lanes", names)
    fault = m["at_fault"] > 0
    rows = np.arange(len(ego))
    all_speed = np.asarray(run.record.speed)  # [P, T + 1, A]
    speed = all_speed[rows, :, ego]  # [P, T + 1]
    hit_t = np.clip(np.asarray(run.record.first_collision_t)[rows, ego], 0, speed.shape[1] - 1)
    partner = np.maximum(np.asarray(run.record.collision_partner)[rows, ego], 0)
    before = np.maximum(hit_t - BRAKE_WINDOW, 0)
    window = np.maximum(hit_t - before, 1) * cfg.dt  # s (shorter for a contact in the first second)
    ego_brake = (speed[rows, before] - speed[rows, hit_t]) / window  # m/s^2 of slowing before contact
    partner_brake = (all_speed[rows, before, partner] - all_speed[rows, hit_t, partner]) / window
    by_rule = {}
    for r in dict.fromkeys(rule[fault]):
        k = fault & (rule == r)
        med = lambda x, k=k: round(float(np.median(x[k])), 1)  # noqa: E731
        by_rule[r] = dict(n=int(k.sum()), ego_speed=med(f["ego_speed"]), partner_speed=med(f["partner_speed"]),
                          ego_brake=med(ego_brake), partner_brake=med(partner_brake))
    off = m["offroad"] > 0
    last = np.clip(np.asarray(run.record.first_offroad_t)[rows, ego], 0, speed.shape[1] - 1)  # the exit row
    exit_speed = speed[rows, last]
    yaw = np.unwrap(np.asarray(run.record.yaw)[rows, :, ego], axis=1)
    turn = np.degrees(np.abs(yaw[rows, last] - yaw[:, 0]))
    top = np.bincount(scene).argmax()
    share = lambda k: round(float((k & (scene == top)).sum() / max(k.sum(), 1)), 2)  # noqa: E731
    return dict(at_fault=by_rule, offroad=dict(
        n=int(off.sum()), exit_speed=round(float(np.median(exit_speed[off])), 1) if off.any() else None,
        reversing=int((exit_speed[off] < 0).sum()),
        heading_change=round(float(np.median(turn[off])), 1) if off.any() else None),
        top_scene=dict(scene=int(top), pairs=int((scene == top).sum()), at_fault_share=share(fault),
                       offroad_share=share(off)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small")
    ap.add_argument("--scenes", required=True, help="converted real scene cache (launch.build_scenes)")
    ap.add_argument("--manifests", default="", help="split manifests (default SCENES/splits)")
    ap.add_argument("--split", default="random")
    ap.add_argument("--regimes", default="expert,idm", help="traffic regimes (comma-separated)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    ego = episodes.from_spec(f"policy={a.policy}")
    idm = episodes.builtin("idm")
    st = suite.cached_suite(a.scenes, a.manifests or os.path.join(a.scenes, "splits"), (a.split,))
    traffic = {"anchor": episodes.from_spec(f"anchor={a.policy}")}
    cfg = episodes.bench_config(st.cfg, ego)
    sp = st.splits[a.split]
    as_built = ego._replace(sim=dataclasses.replace(ego.sim, obs_road=st.bank.cell_road.shape[-1]))
    cut = suite.for_policies(st, cfg)
    kept, excluded = suite.drivable(cut, cfg)
    ks = kept.splits[a.split]
    stats = {k: np.asarray(v) for k, v in stats_lib.driver_statistics(cut.bank, cut.cfg).items()}
    per_pair = {k: v[ks.scene, ks.ego] for k, v in stats.items() if k != "driver"}
    no_lane_route = np.asarray(cut.bank.route_lane[ks.scene, ks.ego, 0] < 0)
    normal = conditions.STYLES["normal"]
    out = dict(policy=a.policy, scenes=a.scenes, split=a.split, excluded=excluded[a.split].to_json(),
               ego_route_from_log=int(no_lane_route.sum()), regimes={})
    for regime in a.regimes.split(","):
        rows = {}
        m = episodes.run(as_built, regime, traffic, st.bank, sp.scene, sp.ego, normal, 0,
                         episodes.bench_config(st.cfg, as_built)).metrics
        rows["road view as built"] = rates(m)
        m = episodes.run(ego, regime, traffic, cut.bank, sp.scene, sp.ego, normal, 0, cfg).metrics
        rows["road view as trained"] = rates(m)
        run = episodes.run(ego, regime, traffic, kept.bank, ks.scene, ks.ego, normal, 0, cfg)
        m = run.metrics
        rows["drivable pairs"] = rates(m)
        mi = episodes.run(idm, regime, traffic, kept.bank, ks.scene, ks.ego, normal, 0, cfg).metrics
        rows["IDM ego, drivable pairs"] = rates(mi)
        rows["IDM ego, route from its log"] = rates(mi, no_lane_route)
        by = {}
        for stat, (lo, hi) in BUCKETS.items():
            x = per_pair[stat]
            by[stat] = {f"< {lo}": rates(m, x < lo), f"{lo}-{hi}": rates(m, (x >= lo) & (x <= hi)),
                        f"> {hi}": rates(m, x > hi)}
        out["regimes"][regime] = dict(ladder=rows, by_start_statistic=by,
                                      failures=how_they_fail(run, kept.bank, ks.scene, ks.ego, cfg))
    for regime, r in out["regimes"].items():
        print(f"== {regime} traffic ({a.split} split of {a.scenes})")
        for name, v in r["ladder"].items():
            print(f"  {name:30s} pairs {v['pairs']:4d}  completed {v['completed']:5.1f}  off-road {v['offroad']:5.1f}"
                  f"  at fault {v['at_fault']:5.1f}  timeout {v['timeout']:5.1f}")
        for stat, buckets in r["by_start_statistic"].items():
            print(f"  {stat:22s} " + "  ".join(f"{b}: n {v['pairs']} off-road {v['offroad']} at fault {v['at_fault']}"
                                               for b, v in buckets.items()))
        fl = r["failures"]
        print("  at fault by rule: " + "; ".join(
            f"{k} {v['n']} (ego {v['ego_speed']} m/s braking {v['ego_brake']} m/s^2 in the last second, partner "
            f"{v['partner_speed']} m/s braking {v['partner_brake']})" for k, v in fl["at_fault"].items()))
        print(f"  off-road: {fl['offroad']['n']} exits at a median {fl['offroad']['exit_speed']} m/s, "
              f"{fl['offroad']['reversing']} reversing, median heading change {fl['offroad']['heading_change']} deg; "
              f"scene {fl['top_scene']['scene']} ({fl['top_scene']['pairs']} pairs) holds "
              f"{fl['top_scene']['at_fault_share']:.0%} of the at-fault and "
              f"{fl['top_scene']['offroad_share']:.0%} of the off-road")
    print(excluded[a.split].line(a.split) + f"; {out['ego_route_from_log']} drivable egos have no lane route")
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
