"""Self-play evaluation of a policy: one greedy episode on every scene of a bank, every controllable
agent driven by the policy under a given condition (or several conditions mixed in every world).

    res = evaluate(net, net_params, bank, conditions.style("normal"), params, sim, key)   # [N, A] masks
    rates = summarise(res)                                                                # plain floats

A per-agent classifier of the episode (e.g. the benchmark's at-fault rule) can be passed in as
`classify(states [T + 1, ...], final, scenario, agent, sim) -> [] bool` (a module-level function: it
keys the compile cache); it is computed inside the same compiled program and reported as
"classified". RL itself knows no benchmark: the caller brings the rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.sim import env, metrics, types
from cp_jax.sim.types import Scenario, SimConfig, SimParams

Classify = Callable  # (states [T + 1, ...], final SimState, scenario, agent [] int, SimConfig) -> [] bool


def evaluate(
    net: networks.ActorCritic,
    net_params,
    bank: Scenario,
    cond: jax.Array,
    params: SimParams,
    sim: SimConfig,
    key: jax.Array,
    greedy: bool = True,
    classify: Classify | None = None,
) -> dict[str, jax.Array]:
    """One episode on every scene of the bank, every controllable agent driven by the policy under
    cond [COND_DIM] or [A, COND_DIM]. Returns per-agent outcome masks [N, A] ("goal", "collision",
    "offroad", "timeout"), "controlled" [N, A] and "mean_speed" [N, A] (|speed| averaged over alive
    steps); with classify also "classified" [N, A] (the rule applied to every controlled agent)."""
    n = jax.tree.leaves(bank)[0].shape[0]
    run = _evaluator(net.cfg, sim, greedy, classify)
    final, controlled, speed, flag = run(net_params, bank, jnp.asarray(cond, jnp.float32), params,
                                         jax.random.split(key, n))
    out = {k: v & controlled for k, v in metrics.outcomes(final).items()}
    if classify is not None:
        out["classified"] = flag & controlled
    return dict(out, controlled=controlled, mean_speed=speed)


def evaluate_mixed(
    net: networks.ActorCritic,
    net_params,
    bank: Scenario,
    conds: jax.Array,
    params: SimParams,
    sim: SimConfig,
    key: jax.Array,
    greedy: bool = True,
    classify: Classify | None = None,
) -> list[dict[str, float]]:
    """The K conditions conds [K, COND_DIM] mixed in every world: in rotation r = 0..K-1 agent i
    drives under conds[(i + r) % K], so every agent drives under every condition once and each
    condition meets the same mix of traffic. -> K summaries (as `summarise`) over the agents under
    each condition. Unlike one evaluate() per condition, where every agent shares it and the world
    changes with it (fast conditions clear their worlds sooner), this compares the conditions
    themselves."""
    conds = np.asarray(conds, np.float32)
    k = conds.shape[0]
    which = [(np.arange(sim.max_agents) + r) % k for r in range(k)]  # rotation r: agent -> condition
    runs = [jax.device_get(evaluate(net, net_params, bank, jnp.asarray(conds[w]), params, sim, key, greedy, classify))
            for w in which]
    out = []
    for j in range(k):  # condition j's agents in every rotation, the rotations' worlds stacked
        parts = [_only(res, np.asarray(res["controlled"]) & (w == j)[None]) for res, w in zip(runs, which, strict=True)]
        out.append(summarise({name: np.concatenate([p[name] for p in parts]) for name in parts[0]}))
    return out


def _only(result: dict, mask: np.ndarray) -> dict:
    """evaluate()'s per-agent arrays [N, A] kept where mask [N, A], zero elsewhere; mask as "controlled"."""
    return {name: np.where(mask, np.asarray(v), 0) for name, v in result.items()} | {"controlled": mask}


def summarise(result: dict[str, jax.Array]) -> dict[str, float]:
    """evaluate()'s per-agent masks -> outcome rates over the controlled agents (and the share
    classified), their mean speed and how many there were (plain floats / int)."""
    result = jax.device_get(result)
    ctrl = np.asarray(result["controlled"])
    n = max(int(ctrl.sum()), 1)
    out = {k: float(np.asarray(result[k]).sum() / n) for k in metrics.OUTCOMES}
    if "classified" in result:
        out["classified"] = float(np.asarray(result["classified"]).sum() / n)
    out["mean_speed"] = float(np.asarray(result["mean_speed"])[ctrl].mean()) if ctrl.any() else 0.0
    out["agents"] = int(ctrl.sum())
    return out


@functools.lru_cache(maxsize=16)
def _evaluator(net_cfg: networks.NetConfig, sim: SimConfig, greedy: bool, classify: Classify | None):
    """evaluate()'s compiled body, one per (network, sim config, greedy, classifier)."""
    net = networks.ActorCritic(net_cfg)

    def act(p, obs, s, key, carry=None):  # carry: an LSTM's memory (None for a feed-forward network)
        logits, _, carry = net.apply(p, obs, carry)
        return env.Act(dist.greedy(logits) if greedy else dist.sample(key, logits), carry, (s.alive, s.speed))

    def one(net_params, scenario, cond, params, k):
        s0 = env.reset(scenario, k, cond, sim)
        final, traj = env.rollout(act, net_params, s0, scenario, params, sim, sim.episode_steps,
                                  keep_states=classify is not None,
                                  memory=networks.initial_carry(net.cfg, (sim.max_agents,)))
        alive, speed = traj.extras
        mean_speed = jnp.sum(jnp.where(alive, jnp.abs(speed), 0.0), 0) / jnp.maximum(alive.sum(0), 1)
        flag = None
        if classify is not None:
            states = env.stack_states(traj.state, final)
            flag = jax.vmap(lambda i: classify(states, final, scenario, i, sim))(jnp.arange(sim.max_agents))
        return final, s0.controller == types.POLICY, mean_speed, flag

    return jax.jit(jax.vmap(one, in_axes=(None, 0, None, None, 0)))
