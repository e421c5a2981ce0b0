"""Benchmark episodes: one ego per (scene, ego) pair, everyone else driven by a traffic regime.

An episode starts at log frame 0 and runs `cfg.episode_steps` steps; agents are removed on goal,
collision or off-road (remove-on-event, BehaviorBench). The ego is either a policy (greedy actions
under its given style) or a non-learned driver (`expert` = log replay, `idm`, `const_vel`).

Traffic regimes (every agent but the ego; agents the simulator cannot control replay their logs):

| regime | non-ego agents | their condition |
|---|---|---|
| idm | IDM along their lane routes | normal style (2 m goal radius) |
| ppo | the non-conditioned self-play policy | normal style |
| smart_bc | the behaviour-cloned policy ("SMART stand-in (BC)") | normal style |
| expert | log replay | normal style |
| aggressive / normal / cautious | the conditioned anchor | that style |
| mix | the conditioned anchor | aggressive, normal, cautious round-robin by agent index |

Traffic policies *sample* their actions (key per pair and seed), the ego acts greedily: seeds vary
the traffic, so a regime driven by a policy has a spread over seeds and IDM / expert have none.

All pairs of a split run as one jitted, vmapped rollout (`run`); per-episode metrics
(`cp_jax.bench.metrics.episode_metrics`) are computed inside the same program.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.bench import metrics as bench_metrics
from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.sim import conditions, env, types
from cp_jax.sim.types import Scenario, SimConfig, SimParams


@dataclasses.dataclass(frozen=True)
class Regime:
    """A traffic regime: how every agent but the ego is driven (module docstring's table)."""

    name: str
    label: str  # as the tables print it
    controller: int  # types.IDM / LOG (built-in) or OTHER_POLICY (a traffic policy)
    policy: str | None = None  # which traffic policy drives it: "anchor", "ppo" or "smart_bc"
    styles: tuple[str, ...] = ("normal",)  # the agents' conditions, round-robin by agent index

    def conditions(self, num_agents: int) -> np.ndarray:
        """[A, COND_DIM] conditions of the non-ego agents."""
        return np.stack([conditions.STYLES[self.styles[i % len(self.styles)]] for i in range(num_agents)])


REGIMES: dict[str, Regime] = {r.name: r for r in (
    Regime("idm", "IDM", types.IDM),
    Regime("ppo", "PPO", types.OTHER_POLICY, "ppo"),
    Regime("smart_bc", "SMART stand-in (BC)", types.OTHER_POLICY, "smart_bc"),
    Regime("expert", "Expert", types.LOG),
    Regime("aggressive", "Aggressive", types.OTHER_POLICY, "anchor", ("aggressive",)),
    Regime("normal", "Normal", types.OTHER_POLICY, "anchor", ("normal",)),
    Regime("cautious", "Cautious", types.OTHER_POLICY, "anchor", ("cautious",)),
    Regime("mix", "Mix", types.OTHER_POLICY, "anchor", ("aggressive", "normal", "cautious")),
)}
TRAFFIC_POLICIES = ("anchor", "ppo", "smart_bc")  # the traffic policies a regime may need
BUILTIN_EGOS = {"expert": types.LOG, "idm": types.IDM, "const_vel": types.CONST_VEL}


def get(name: str) -> Regime:
    """The regime named `name`; unknown names raise, listing the known ones."""
    if name not in REGIMES:
        raise ValueError(f"unknown regime {name!r}; known: {', '.join(REGIMES)}")
    return REGIMES[name]


def label(name: str) -> str:
    """A regime's table label (its name when it is not a regime)."""
    return REGIMES[name].label if name in REGIMES else name


def regime_names(names) -> list[str]:
    """The regimes a list names ("all": every one, in table order); unknown names raise."""
    names = list(REGIMES) if list(names) == ["all"] else list(names)
    for n in names:
        get(n)
    return names


OBS_FIELDS = ("obs_partners", "obs_road", "partner_radius", "grid_size")


class Driver(NamedTuple):
    """A policy (net + params + the SimConfig it was trained with) or a built-in controller."""

    name: str
    net: networks.ActorCritic | None = None
    params: Any = None
    sim: SimConfig | None = None
    builtin: int | None = None  # types.LOG / IDM / CONST_VEL when net is None


def builtin(name: str) -> Driver:
    if name not in BUILTIN_EGOS:
        raise ValueError(f"unknown built-in driver {name!r}; known: {sorted(BUILTIN_EGOS)}")
    return Driver(name=name, builtin=BUILTIN_EGOS[name])


def from_saved(name: str, policy) -> Driver:
    """A Driver from a `cp_jax.policy.saved.SavedPolicy`."""
    return Driver(name=name, net=policy.net, params=policy.params, sim=policy.sim)


def from_spec(spec: str) -> Driver:
    """A Driver from `folder`, `name=folder` or a built-in's name (expert, idm, const_vel; `name=idm`
    too); raises ValueError naming the spec."""
    from cp_jax.policy import saved

    name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
    if path in BUILTIN_EGOS:
        return builtin(path)._replace(name=name or path)
    if not os.path.isdir(path):
        raise ValueError(f"--policy={spec}: {path!r} is neither a policy folder nor one of {sorted(BUILTIN_EGOS)}")
    return from_saved(name or os.path.basename(os.path.normpath(path)), saved.load(path))


def bench_config(scene_cfg: SimConfig, *drivers: Driver) -> SimConfig:
    """The SimConfig episodes run with: the scenes' sizes, every agent's events checked
    (max_controlled None), IDM compiled in (run() compiles it out of regimes where no agent uses
    it); the policies' observation fields (all policies must agree on them: they share one
    observation)."""
    cfg = dataclasses.replace(scene_cfg, max_controlled=None, enable_idm=True, remove_on_event=True)
    sims = [(d.name, d.sim) for d in drivers if d.sim is not None]
    for field in OBS_FIELDS:
        values = {n: getattr(s, field) for n, s in sims}
        if len(set(values.values())) > 1:
            raise ValueError(f"policies disagree on SimConfig.{field}: {values}; they must share one observation")
        if values:
            cfg = dataclasses.replace(cfg, **{field: next(iter(values.values()))})
    return cfg


def episode_config(cfg: SimConfig, ego: Driver, regime: str) -> SimConfig:
    """cfg with the IDM controller compiled out unless the regime's traffic or the ego is IDM: the
    step's IDM branch is then unused (same episodes), and it is the costliest part of a step with
    many agents (real scenes, 128 agents: 67 of 70 s of the expert-ego sanity run)."""
    uses_idm = REGIMES[regime].controller == types.IDM or (ego.net is None and ego.builtin == types.IDM)
    return cfg if uses_idm else dataclasses.replace(cfg, enable_idm=False)


@functools.lru_cache(maxsize=32)
def _episode_fn(ego_cfg: networks.NetConfig | None, ego_builtin: int | None,
                traffic_cfg: networks.NetConfig | None, cfg: SimConfig):
    """Compiled vmapped episodes, one program per (ego network, traffic network, SimConfig)."""
    ego_net = networks.ActorCritic(ego_cfg) if ego_cfg is not None else None
    traffic_net = networks.ActorCritic(traffic_cfg) if traffic_cfg is not None else None
    a = cfg.max_agents
    ego_ctrl = types.POLICY if ego_net is not None else ego_builtin

    def one(ego_params, traffic_params, bank, scene, ego, ego_cond, traffic_cond, traffic_ctrl, key, params):
        scenario = env.take_scenario(bank, scene)
        is_ego = jnp.arange(a) == ego
        cond = jnp.where(is_ego[:, None], ego_cond[None, :], traffic_cond)
        s0 = env.reset(scenario, key, cond, cfg, jnp.where(is_ego, ego_ctrl, traffic_ctrl))

        def act(_, obs, s, k, carries):
            """Traffic samples its actions from the traffic policy; the ego acts greedily on its own row."""
            carry_e, carry_t = carries
            action = jnp.zeros((a,), jnp.int32)
            if traffic_net is not None:
                logits, _, carry_t = traffic_net.apply(traffic_params, obs, carry_t)
                action = dist.sample(k, logits)
            if ego_net is not None:
                row = jax.tree.map(lambda x: x[ego][None], obs)
                logits, _, carry_e = ego_net.apply(ego_params, row, carry_e)
                action = jnp.where(is_ego, dist.greedy(logits)[0], action)
            return env.Act(action, (carry_e, carry_t))

        carries = (
            networks.initial_carry(ego_cfg, (1,)) if ego_net is not None else None,
            networks.initial_carry(traffic_cfg, (a,)) if traffic_net is not None else None,
        )
        final, traj = env.rollout(act, None, s0, scenario, params, cfg, cfg.episode_steps, keep_states=True,
                                  memory=carries)
        rec = bench_metrics.record_from_states(env.stack_states(traj.state, final), final)
        out = bench_metrics.episode_metrics(rec, scenario, ego, cfg)
        out["ego_controlled"] = s0.controller[ego] == ego_ctrl
        return out, rec

    axes = (None, None, None, 0, 0, None, None, None, 0, None)
    return jax.jit(jax.vmap(one, in_axes=axes))


class Episodes(NamedTuple):
    metrics: dict[str, np.ndarray]  # name -> [P]
    record: bench_metrics.EpisodeRecord  # [P, ...] (for figures)


def run(
    ego: Driver,
    regime: str,
    traffic: dict[str, Driver],
    bank: Scenario,
    scene: np.ndarray,
    ego_index: np.ndarray,
    ego_cond: np.ndarray,
    seed: int,
    cfg: SimConfig,
    params: SimParams | None = None,
) -> Episodes:
    """Episodes of every pair (scene [P] index into bank, ego_index [P]) under one regime.

    traffic maps "ppo" / "smart_bc" / "anchor" to their drivers (only the one the regime needs is
    read); ego_cond [COND_DIM] is the ego's style. Pair p's key is fold_in(PRNGKey(seed), p).
    """
    reg = get(regime)
    need, t_driver = reg.policy, None
    if need is not None:
        if need not in traffic:
            raise ValueError(f"regime {regime!r} needs a {need!r} traffic policy; given: {sorted(traffic)}")
        t_driver = traffic[need]
    params = types.default_params() if params is None else params
    fn = _episode_fn(ego.net.cfg if ego.net is not None else None, ego.builtin,
                     t_driver.net.cfg if t_driver is not None else None, episode_config(cfg, ego, regime))
    p = len(scene)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.arange(p))
    out, rec = fn(
        ego.params, t_driver.params if t_driver is not None else None, bank,
        jnp.asarray(scene, jnp.int32), jnp.asarray(ego_index, jnp.int32), jnp.asarray(ego_cond, jnp.float32),
        jnp.asarray(reg.conditions(cfg.max_agents)), jnp.int32(reg.controller), keys, params,
    )
    return Episodes(metrics={k: np.asarray(v) for k, v in jax.device_get(out).items()}, record=rec)
