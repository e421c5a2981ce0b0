"""Self-play driving from any SimState: the one loop behind records, branches and re-runs.

Every POLICY agent acts from its own condition (state.cond) with one shared policy; everyone else
follows its controller. The PRNG key is split off state.key each step exactly as env.rollout does,
so a run is a function of its starting state: restoring a snapshot and driving again replays it, and
branches given the same key share their random numbers (common random numbers).
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
    action: jax.Array | None = None  # [N, A] every agent's action (keep_transitions)
    logp: jax.Array | None = None  # [N, A] its log-probability under the driving policy
    reward: jax.Array | None = None  # [N, A] the step's reward under each agent's condition (0 once over)
    terminated: jax.Array | None = None  # [N, A] bool: removed by this step's goal / collision / off-road


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
    keep_transitions: bool = False,
) -> tuple[SimState, Trace]:
    """Run num_steps (static) of observe -> policy -> step from `state` (one scene, unbatched).

    Steps past sim.episode_steps (or from stop_t [] int on) leave the state unchanged (so branches
    from different roots share one static length). row [] int: also keep that agent's observation,
    action and acting mask. keep_every k > 1 (with keep_states): Trace.state holds only the state
    before every k-th step [ceil(num_steps / k), ...]; the run is then rounded up to whole chunks of
    k steps, so num_steps must reach the episode's end (the extra steps are frozen). keep_transitions:
    also every agent's action, its log-probability, reward and termination (PPO's samples).
    Returns (final state, Trace [num_steps]). Feed-forward policies only (an LSTM's memory would
    have to be part of the snapshot)."""
    if net.cfg.lstm:
        raise ValueError("CounterPlay needs a feed-forward policy (NetConfig.lstm = 0): snapshots do not hold "
                         "an LSTM's memory")

    def body(snapshot: SimState, _):
        running = snapshot.t < sim.episode_steps
        if stop_t is not None:
            running = running & (snapshot.t < stop_t)
        key, k_act = jax.random.split(snapshot.key)
        s = snapshot.replace(key=key)
        obs = env.observe(s, scenario, sim)
        logits, value, _ = net.apply(net_params, obs)
        action = dist.greedy(logits) if greedy else dist.sample(k_act, logits)
        nxt, out = env.step(s, action, scenario, params, sim)
        nxt = jax.tree.map(lambda new, old: jnp.where(running, new, old), nxt, snapshot)
        policy_alive = s.alive & (s.controller == types.POLICY)
        trace = Trace(
            counted=jnp.where(running, policy_alive.sum(), 0).astype(jnp.float32),
            state=snapshot if keep_states and keep_every == 1 else None,  # with its key: driving from it replays
            alive=snapshot.alive if keep_alive else None,
            value=value if keep_values else None,
            value_under=None if value_conds is None else jax.vmap(
                lambda c: networks.value_under(net, net_params, obs, c), out_axes=-1)(value_conds),
            row_obs=None if row is None else jax.tree.map(lambda x: x[row], obs),
            row_action=None if row is None else action[row],
            row_acting=None if row is None else running & s.alive[row],
            action=action if keep_transitions else None,
            logp=dist.log_prob(logits, action) if keep_transitions else None,
            reward=jnp.where(running, out.reward, 0.0) if keep_transitions else None,
            terminated=running & out.terminated if keep_transitions else None,
        )
        return nxt, trace

    if keep_every == 1 or not keep_states:
        return jax.lax.scan(body, state, None, length=num_steps)
    if num_steps < sim.episode_steps:
        raise ValueError(f"drive(keep_every={keep_every}) runs whole chunks: num_steps ({num_steps}) must reach "
                         f"the episode's end ({sim.episode_steps})")

    def chunk(snapshot: SimState, _):
        nxt, trace = jax.lax.scan(body, snapshot, None, length=keep_every)
        return nxt, (snapshot, trace)

    n_chunks = -(-num_steps // keep_every)
    final, (snapshots, trace) = jax.lax.scan(chunk, state, None, length=n_chunks)
    trace = jax.tree.map(lambda x: x.reshape((n_chunks * keep_every,) + x.shape[2:])[:num_steps], trace)
    return final, trace.replace(state=snapshots)
