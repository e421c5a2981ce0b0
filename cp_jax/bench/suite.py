"""The scenes and splits a benchmark runs on: a scenario bank plus, per split, its (scene, ego) pairs.

- `procedural_suite`: procedural scenes (PROCEDURAL_SETS: the validation set's seeds 300000+, never used for
  training, the anchor's held-out evaluation or the quickstart; the test set's 9000000+, read only by
  the results command), every eligible pair scored by
  `cp_jax.scenarios.splits`, the Interactive split = the top n by interactivity, the Random split
  = n sampled with a seed. Like a converted cache, a procedural set has its own SimConfig
  (PROCEDURAL_CONFIG: object slots, road sizes, steps): the scenes do not depend on the policies scored
  on them (a policy's max_agents once capped the objects placed: other scenes, other scores). Only what
  the policies observe (POLICY_FIELDS) is theirs; where their other fields differ, the splits' warning
  says so.
- `cached_suite`: a converted scenario cache (`launch.build_scenes`) plus split manifests written by
  `launch.make_splits` (interactive.csv, random.csv). Pairs name scenes by id and egos by object
  index; every pair is checked against the built scene (the scene exists, the ego is a valid,
  controllable vehicle at t = 0), errors name the manifest and the pair.

Before episodes run, `for_policies` gives the bank the observation the policies were trained with
(each cell's road list cut to their obs_road; a bank built with another road index is refused), and
`drivable` drops the pairs no driver could complete cleanly, by the simulator's own off-road rule
on the ego's logged boxes: its start pose is off the road, or its logged path leaves the road within
the episode. They are reported apart (`Excluded`), with two kinds of kept pairs: those whose ego has
no route (an IDM ego there replays its log: a cache built before routes along logged paths), and those
whose goal is out of reach (`goal_reach`: even the hardest braking of the policies' action grid, through
the actuator, cannot bring the ego from its start speed to the goal speed (the highest of the run's ego
styles) before it has passed the goal; typically a highway car whose log ends where it left the sensors'
range, at speed).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.scenarios import bank as bank_lib
from cp_jax.scenarios import splits as splits_lib
from cp_jax.sim import conditions, dynamics, env, types
from cp_jax.sim.types import Scenario, SimConfig

SPLITS = ("interactive", "random")
# Procedural scene sets by name and role (docs/decisions.md, "Data roles"): every choice is made on
# the validation set; the test set is read only by the results command (launch.results), which names it.
PROCEDURAL_SETS = {"procedural": (300_000, "validation"), "procedural_test": (9_000_000, "test")}
PROCEDURAL_SEED = PROCEDURAL_SETS["procedural"][0]
# The procedural sets' SimConfig (the shipped anchors' own, so their scenes are the ones they always were);
# the policies' observation fields replace its own (POLICY_FIELDS).
PROCEDURAL_CONFIG = SimConfig(max_agents=16, obs_road=64, enable_idm=False)
POLICY_FIELDS = ("obs_partners", "obs_road", "partner_radius", "grid_size", "discrete_actions")
RUN_FIELDS = ("max_controlled", "enable_idm", "remove_on_event")  # set per run (episodes.bench_config)


def refuse_test_set(scenes: str, field: str) -> None:
    """Raise when a job other than the results command names the procedural test set."""
    if PROCEDURAL_SETS.get(scenes, (0, ""))[1] == "test":
        raise ValueError(f"{field}={scenes}: the test set is read only by python -m launch.results; "
                         "make choices on 'procedural' (validation)")


class SplitPairs(NamedTuple):
    pairs: list  # [splits.Pair]
    scene: np.ndarray  # [P] int: index into the suite's bank
    ego: np.ndarray  # [P] int: agent slot
    warning: str = ""


class Suite(NamedTuple):
    names: list[str]  # scene ids, bank order
    bank: Scenario  # [N, ...]
    cfg: SimConfig  # what the bank was built with
    splits: dict[str, SplitPairs]


def _index(pairs, names: list[str], where: str) -> SplitPairs:
    index = {n: i for i, n in enumerate(names)}
    missing = [p.scene_id for p in pairs if p.scene_id not in index]
    if missing:
        raise ValueError(f"{where}: scene ids not in the scene set: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    scene = np.array([index[p.scene_id] for p in pairs], np.int32)
    ego = np.array([int(p.ego) for p in pairs], np.int32)
    return SplitPairs(list(pairs), scene, ego)


def procedural_config(policy: SimConfig) -> tuple[SimConfig, str]:
    """(the SimConfig a procedural set is built with: PROCEDURAL_CONFIG with `policy`'s POLICY_FIELDS, a
    note naming `policy`'s other fields that differ from it and were not used; "" when none)."""
    cfg = dataclasses.replace(PROCEDURAL_CONFIG, **{f: getattr(policy, f) for f in POLICY_FIELDS})
    differ = [f.name for f in dataclasses.fields(SimConfig)
              if f.name not in POLICY_FIELDS + RUN_FIELDS and getattr(policy, f.name) != getattr(cfg, f.name)]
    if not differ:
        return cfg, ""
    return cfg, ("procedural scenes built with the set's own " + ", ".join(f"{f}={getattr(cfg, f)}" for f in differ)
                 + ", not the policy's " + ", ".join(f"{f}={getattr(policy, f)}" for f in differ)
                 + " (scores comparable with every other run on this set)")


def procedural_suite(
    num_scenes: int, num_pairs: int, cfg: SimConfig, seed: int = PROCEDURAL_SEED, agents: int = 12,
    split_seed: int = 0, cache_dir: str = "~/.cache/cp_jax/scenes",
) -> Suite:
    """num_scenes procedural scenes and both splits of num_pairs pairs each, built with
    procedural_config(cfg) (cfg: a policy's SimConfig; only its observation fields are used, the others
    that differ are named in every split's warning)."""
    cfg, note = procedural_config(cfg)
    raws = bank_lib.procedural_scenes(num_scenes, seed, agents, max_objects=cfg.max_agents,
                                      max_road_segments=cfg.max_road_segments)
    names, bank = bank_lib.cached_procedural_bank(cache_dir, num_scenes, seed, agents, cfg)
    pairs = splits_lib.score_scenes(raws)
    made = {"interactive": splits_lib.interactive_split(pairs, num_pairs),
            "random": splits_lib.random_split(pairs, num_pairs, split_seed)}
    out = {}
    for name, split in made.items():
        sp = _index(split, names, f"procedural {name} split")
        out[name] = sp._replace(warning="; ".join(w for w in (split.warning, note) if w))
    return Suite(names, bank, cfg, out)


def read_manifests(manifests: str, split_names=SPLITS) -> dict[str, tuple[str, list]]:
    """{split: (its manifest's path, [splits.Pair])} from `manifests/<split>.csv`; FileNotFoundError or
    ValueError naming the file (and line) when one is missing or damaged, or when none names a pair."""
    if not os.path.isdir(manifests):
        raise FileNotFoundError(f"{manifests}: not a folder of split manifests (write them with launch.make_splits)")
    out = {}
    for split in split_names:
        path = os.path.join(manifests, f"{split}.csv")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: missing (write it with launch.make_splits)")
        out[split] = (path, splits_lib.read_manifest(path))
    if not any(pairs for _, pairs in out.values()):
        raise ValueError(f"{manifests}: the manifests {list(split_names)} name no pairs")
    return out


def cached_suite(cache_dir: str, manifests: str, split_names=SPLITS) -> Suite:
    """A converted scene cache and the manifests `manifests/<split>.csv`. Only the scenes the manifests name
    are read: memory grows with the splits, not with the cache."""
    from cp_jax.scenarios import cache  # tensorflow-datasets only when a cache is read

    sc = cache.ScenarioCache(cache_dir)
    manifests_read = read_manifests(manifests, split_names)
    all_names = sc.names()
    known = set(all_names)
    for path, pairs in manifests_read.values():
        unknown = sorted({p.scene_id for p in pairs} - known)
        if unknown:
            raise ValueError(f"{path}: scene ids not in the cache {cache_dir}: {unknown[:5]}"
                             f"{' ...' if len(unknown) > 5 else ''} (manifests written for another cache?)")
    named = {p.scene_id for _, pairs in manifests_read.values() for p in pairs}
    names, bank = sc.load_bank([i for i, n in enumerate(all_names) if n in named])
    out = {}
    for split, (path, pairs) in manifests_read.items():
        sp = _index(pairs, names, path)
        _check_egos(bank, sp, path)
        out[split] = sp
    return Suite(names, bank, sc.cfg, out)


def _check_egos(bank: Scenario, sp: SplitPairs, path: str) -> None:
    b = jax.device_get(bank)
    a = b.agent_valid.shape[1]
    for p, s, e in zip(sp.pairs, sp.scene, sp.ego, strict=True):
        ok = 0 <= e < a and bool(b.agent_valid[s, e] and b.log_valid[s, e, 0] and b.controllable[s, e]
                                 and b.obj_type[s, e] == types.VEHICLE)
        if not ok:
            raise ValueError(f"{path}: pair ({p.scene_id}, ego {p.ego}): not a valid controllable vehicle at t=0 "
                             "in the converted scene (was the scene truncated to fewer objects?)")


# ----------------------------------------------------------------------------------------------
# The bank as the policies see it, and the pairs a driver can complete


def for_policies(st: Suite, cfg: SimConfig) -> Suite:
    """st with its bank cut to cfg's observation (`episodes.bench_config`: the policies' obs_road,
    grid_size): each cell's nearest-first road list keeps its first cfg.obs_road entries, so a policy
    trained with 64 road segments sees 64 on a cache built with 128. Raises ValueError when the bank
    holds fewer entries or another road index than cfg needs."""
    for name in ("grid_size", "cell_edges", "cell_lanes"):
        if getattr(st.cfg, name) != getattr(cfg, name):
            raise ValueError(f"the scenes were built with SimConfig.{name}={getattr(st.cfg, name)}, the policies "
                             f"need {getattr(cfg, name)} (rebuild the scene cache with their value)")
    have = st.bank.cell_road.shape[-1]
    if have < cfg.obs_road:
        raise ValueError(f"the scenes were built with obs_road={have}, the policies observe {cfg.obs_road} road "
                         "segments (rebuild the scene cache with --obs_road >= theirs)")
    bank = st.bank.replace(cell_road=st.bank.cell_road[..., : cfg.obs_road])
    return st._replace(bank=bank, cfg=dataclasses.replace(st.cfg, obs_road=cfg.obs_road))


EXCLUSIONS = ("start_offroad", "log_offroad")  # why a pair is not drivable, first reason first


class Excluded(NamedTuple):
    """What `drivable` set apart in one split."""

    pairs: int  # pairs before
    reasons: dict[str, list]  # reason -> [splits.Pair]
    no_route: list  # kept pairs whose ego has no route (an IDM ego replays its log)
    out_of_reach: list | tuple = ()  # kept pairs whose goal no policy can reach at the goal speed (`goal_reach`)

    def line(self, split: str) -> str:
        gone = sum(len(v) for v in self.reasons.values())
        parts = [f"{len(v)} {k.replace('_', ' ')}" for k, v in self.reasons.items() if v]
        text = f"split {split}: {self.pairs - gone} of {self.pairs} pairs drivable"
        text += f" ({', '.join(parts)} excluded)" if parts else ""
        if self.no_route:
            text += f"; {len(self.no_route)} egos have no route (an IDM ego replays its log: rebuild the cache)"
        if self.out_of_reach:
            text += (f"; {len(self.out_of_reach)} goals out of reach at the goal speed, even braking at once "
                     "(kept; pairs.json)")
        return text

    def to_json(self) -> dict:
        def ids(ps):
            return [[p.scene_id, int(p.ego)] for p in ps]

        return dict(pairs=self.pairs, excluded={k: ids(v) for k, v in self.reasons.items()},
                    no_route=ids(self.no_route), out_of_reach=ids(self.out_of_reach))


GOAL_SPEED = float(conditions.field(conditions.STYLES["normal"], "goal_speed"))


def goal_reach(v0: jax.Array, dist: jax.Array, goal_speed, radius, params: types.SimParams,
               cfg: SimConfig) -> jax.Array:
    """[...] bool: can a car starting at speed v0 [...] (actuator at rest, as env.reset starts it) be
    within radius of a goal dist [...] m away (straight line) at |speed| <= goal_speed within the episode?
    Full braking (the action grid's lowest acceleration, through the actuator's lag, on into reverse)
    gives at every step the lowest speed and the shortest way forward any action sequence can; the
    heading turns at most params.max_lat_accel / v per second, so the car's progress along its starting
    heading is at least sum v cos(that bound) dt while it moves forward (v dt when reversing), and its
    distance from the start at least that. If that is past dist + radius whenever the speed is low enough,
    no driver of the grid can reach the goal in time (a lower bound: some goals it keeps are out of reach)."""
    amin = jnp.min(params.accel_grid)

    def step(c, _):
        v, a, turn, ahead = c
        a = a + params.actuator_lag * (amin - a)
        v1 = jnp.clip(v + a * cfg.dt, -params.max_reverse, params.max_speed)
        vm = 0.5 * (v + v1)
        turn = jnp.minimum(turn + params.max_lat_accel / jnp.maximum(jnp.abs(vm), 1e-3) * cfg.dt, jnp.pi)
        ahead = ahead + jnp.where(vm > 0, vm * jnp.cos(turn), vm) * cfg.dt
        return (v1, dynamics.settle(a, v, v1, cfg.dt), turn, ahead), (v1, ahead)

    zeros = jnp.zeros_like(v0)
    _, (v, ahead) = jax.lax.scan(step, (v0, zeros, zeros, zeros), None, length=cfg.episode_steps)
    return jnp.any((v <= goal_speed) & (ahead <= dist + radius), axis=0)


@functools.partial(jax.jit, static_argnames="cfg")
def ego_log_checks(bank: Scenario, scene: jax.Array, ego: jax.Array, cfg: SimConfig,
                   goal_speed=GOAL_SPEED) -> dict[str, jax.Array]:
    """Per pair [P] bool, from the ego's logged boxes over steps 0..cfg.episode_steps (valid ones) by
    the simulator's off-road rule: start_offroad (at t = 0), log_offroad (at any later step), route
    (the ego has a route, so an IDM ego drives it); and reach (`goal_reach` from the logged start speed
    and the straight distance to the goal; goal_speed in m/s; the default action grid)."""
    t = cfg.episode_steps + 1
    params = types.default_params()

    def one(s, e):
        sc = env.take_scenario(bank, s)
        valid = sc.log_valid[e, :t]
        off = env.is_offroad(sc.log_xy[e, :t], sc.log_yaw[e, :t], sc, cfg, jnp.full((t,), e)) & valid
        v0 = dynamics.log_speed(sc.log_vel[e, 0], sc.log_yaw[e, 0])
        dist = jnp.linalg.norm(sc.goal[e] - sc.log_xy[e, 0])
        reach = goal_reach(v0, dist, goal_speed, conditions.EVAL_GOAL_RADIUS, params, cfg)
        return dict(start_offroad=off[0], log_offroad=jnp.any(off[1:]), route=sc.route_len[e] >= 2, reach=reach)

    return jax.vmap(one)(scene, ego)


def drivable(st: Suite, cfg: SimConfig, goal_speed: float = GOAL_SPEED) -> tuple[Suite, dict[str, Excluded]]:
    """st with every split cut to its drivable pairs (module docstring), and per split what was set apart;
    goal_speed (m/s; the benchmark passes its ego styles' highest) decides which goals are out of reach."""
    out, excluded = {}, {}
    for name, sp in st.splits.items():
        if not len(sp.pairs):
            out[name], excluded[name] = sp, Excluded(0, {k: [] for k in EXCLUSIONS}, [])
            continue
        flags = jax.device_get(ego_log_checks(st.bank, jnp.asarray(sp.scene), jnp.asarray(sp.ego), cfg,
                                              jnp.float32(goal_speed)))
        reason = np.where(flags["start_offroad"], 0, np.where(flags["log_offroad"], 1, -1))
        keep = reason < 0
        excluded[name] = Excluded(
            len(sp.pairs), {k: [p for p, r in zip(sp.pairs, reason, strict=True) if r == i]
                            for i, k in enumerate(EXCLUSIONS)},
            [p for p, k, r in zip(sp.pairs, keep, flags["route"], strict=True) if k and not r],
            [p for p, k, r in zip(sp.pairs, keep, flags["reach"], strict=True) if k and not r])
        out[name] = sp._replace(pairs=[p for p, k in zip(sp.pairs, keep, strict=True) if k],
                                scene=sp.scene[keep], ego=sp.ego[keep])
    return st._replace(splits=out), excluded
