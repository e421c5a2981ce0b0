"""Self-play driving from any SimState: `env.rollout` with one shared policy, what records, branches,
re-runs and the student gate keep of it.

Every POLICY agent acts from its own condition (state.cond); everyone else follows its controller.
A run is a function of its starting state (env.rollout splits the key off state.key): restoring a
snapshot and driving again replays it, and branches given the same key share their random numbers
(common random numbers).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.sim import env, types
from cp_jax.sim.types import Obs, Scenario, SimConfig, SimParams, SimState


@struct.dataclass
class Trace:
    """Per-step outputs of `drive` [N, ...]; fields not asked for are None."""

    counted: jax.Array  # [N] float: POLICY agent-steps simulated this step (0 once the episode is over)
    state: SimState | None = None  # the state before each step (snapshots; every k-th with keep_every = k)
    alive: jax.Array | None = None  # [N, A] bool: alive before each step
    value: jax.Array | None = None  # [N, A] critic value of each agent under its own condition
    value_under: jax.Array | None = None  # [N, A, R] ... under each of the conditions value_conds [R]
    row_obs: Obs | None = None  # [N, ...] the observation of agent `row`
    row_action: jax.Array | None = None  # [N] its action
    row_acting: jax.Array | None = None  # [N] bool: it was alive and the episode running (the sample is real)


def drive(
    net: networks.ActorCritic,
    net_params,
    state: SimState,
    scenario: Scenario,
    params: SimParams,
    sim: SimConfig,
    num_steps: int,
    row: jax.Array | None = None,
    keep_states: bool = False,
    keep_values: bool = False,
    value_conds: jax.Array | None = None,
    greedy: bool = False,
    stop_t: jax.Array | None = None,
    keep_every: int = 1,
    keep_alive: bool = False,
) -> tuple[SimState, Trace]:
    """Run num_steps (static) of env.rollout from `state` (one scene, unbatched) with the policy
    (sampled actions, or the argmax with greedy).

    Steps past sim.episode_steps (or from stop_t [] on) leave the state unchanged. row [] int: also keep
    that agent's observation, action and acting mask. keep_every k > 1 (with keep_states): only every
    k-th snapshot (env.rollout). value_conds [R, COND_DIM]: also every agent's value under each.
    Returns (final state, Trace [num_steps]). Feed-forward policies only (an LSTM's memory would
    have to be part of the snapshot)."""
    if net.cfg.lstm:
        raise ValueError("CounterPlay needs a feed-forward policy (NetConfig.lstm = 0): snapshots do not hold "
                         "an LSTM's memory")

    def act(p, obs, s, key):
        logits, value, _ = net.apply(p, obs)
        action = dist.greedy(logits) if greedy else dist.sample(key, logits)
        extras = dict(
            counted=jnp.sum(s.alive & (s.controller == types.POLICY)),
            alive=s.alive if keep_alive else None,
            value=value if keep_values else None,
            value_under=None if value_conds is None else jax.vmap(
                lambda c: networks.value_under(net, p, obs, c), out_axes=-1)(value_conds),
            row_obs=None if row is None else jax.tree.map(lambda x: x[row], obs),
            row_action=None if row is None else action[row],
            row_alive=None if row is None else s.alive[row],
        )
        return env.Act(action, None, extras)

    final, traj = env.rollout(act, net_params, state, scenario, params, sim, num_steps, keep_states=keep_states,
                              stop_t=stop_t, keep_every=keep_every)
    x, running = traj.extras, traj.running
    trace = Trace(
        counted=jnp.where(running, x["counted"], 0).astype(jnp.float32),
        state=traj.state, alive=x["alive"], value=x["value"], value_under=x["value_under"], row_obs=x["row_obs"],
        row_action=x["row_action"], row_acting=None if row is None else running & x["row_alive"],
    )
    return final, trace
