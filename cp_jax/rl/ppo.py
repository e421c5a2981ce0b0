"""Self-play PPO in the purejaxrl style: one jitted `update` = rollout -> GAE -> minibatch epochs.

Every controlled agent (controller POLICY) of every scene in the batch is driven by the same
policy. Each of the B parallel envs holds one scene of the bank for `rollouts_per_scene` updates:

- an env restarts its scene from log frame 0 (fresh conditions, one per agent, and a fresh key) as
  soon as none of its policy agents is left or the time limit `sim.episode_steps` is reached, so
  no compute idles on finished episodes;
- after `rollouts_per_scene` updates every env draws a new scene of the bank; episodes still
  running then are truncated at the rollout's end (bootstrapped like any time limit).

    runner = init(net, ppo_cfg, sim_cfg, key, bank)
    update = make_update(net, ppo_cfg, sim_cfg, params)   # jitted; bank is an argument
    runner, metrics = update(runner, bank)

Terminated (removed on goal / collision / off-road) and truncated (time limit) are separate:
terminated cuts the bootstrap, truncated bootstraps from V of the final observation (computed on
the steps where some agent is truncated). Samples of agents that are not POLICY-controlled or not
alive before the step are masked out of every loss and statistic, and the update only processes
the first `sample_capacity` x T x B x A samples after moving valid ones to the front (a random
subset when more are valid; `dropped_frac` reports it), in `compact_groups` groups of whole envs
(a multiple of the device count keeps compaction and minibatches device-local). The LSTM variant
stores the carry of every step and re-applies one step from it in the update (no gradient through
time).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cp_jax import parallel
from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.sim import conditions, controllers, env, metrics, types
from cp_jax.sim import reward as reward_lib
from cp_jax.sim.types import Scenario, SimConfig, SimParams, SimState


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Static PPO hyper-parameters (hashable). Defaults follow DESIGN.md section 5."""

    num_envs: int = 32  # scenes stepped in parallel
    rollout_steps: int = 45  # steps per update
    rollouts_per_scene: int = 4  # updates before every env draws a new scene of the bank
    sample_capacity: float = 0.5  # share of the T x B x A rollout slots the update processes (valid first)
    # The envs are compacted (valid samples first) and shuffled in this many groups of whole envs,
    # each keeping capacity / compact_groups samples. 1: one global compaction. A multiple of the
    # device count keeps compaction and minibatches device-local under data parallelism (no gather
    # of the rollout); results then do not depend on how many devices share the groups.
    compact_groups: int = 1
    # > 1: the scenario bank is grouped [bank_groups, S / bank_groups, ...] (`env.group_bank`) and env
    # group g (num_envs / bank_groups whole envs) draws its scenes from bank[g] only. With the groups a
    # multiple of the device count and the bank sharded along them (`parallel.shard_groups`), every
    # device (and host) holds and reads only its share of the scenes. 1: one bank, every env draws from all.
    bank_groups: int = 1
    update_epochs: int = 1
    num_minibatches: int = 4
    lr: float = 3e-4
    lr_schedule: str = "constant"  # constant | linear | cosine (over total_updates)
    total_updates: int = 1000  # for the schedule
    max_grad_norm: float = 0.5
    gamma: float = 0.98
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.005
    norm_adv: bool = True
    adv_filter: bool = False  # keep samples with |A| >= adv_filter_frac * EWMA(max |A|)
    adv_filter_frac: float = 0.01
    adv_filter_beta: float = 0.25
    conditioned: bool = True  # False: the non-conditioned baseline (fixed reward, fixed style)
    goal_radius_range: tuple[float, float] = (2.0, 12.0)  # sampled goal radius (DESIGN: U(2, 12) m)
    # radius = low + (high - low) * u ** goal_radius_power, u ~ U(0, 1): 1 is uniform (DESIGN); > 1 puts
    # more episodes near the evaluation radius (2 m) while keeping the whole range.
    goal_radius_power: float = 1.0
    # Share of agents whose episode condition is one of the five named retry styles (2 m evaluation
    # goal radius) instead of a uniform sample (0: DESIGN's uniform sampling only).
    style_frac: float = 0.0
    # Share of episodes (envs) in which every agent drives under the same one of the five retry
    # styles, drawn per episode: worlds of one style, as the per-style self-play evaluation builds
    # them (per-agent sampling alone never makes one). 0: off.
    shared_style_frac: float = 0.0
    # Training-only progress shaping added to every policy agent's reward: progress_per_m x (distance
    # to goal before the step - after it), so a whole approach pays about progress_per_m x the start
    # distance (0: the paper's reward only). The benchmark and the evaluations never see it.
    progress_per_m: float = 0.0
    # What progress_per_m measures: "goal" (straight-line distance to the goal); "route" (arc length
    # gained along the agent's lane route, Scenario.route_xy: pays for going round a roundabout, which
    # first takes the car no nearer its goal; agents without a route get none; it also pays for
    # driving on past the goal, which the procedural routes extend ~30 m beyond); "route_goal" (distance
    # to the goal along the route, |arc(position) - arc(goal)|: as "route" up to the goal, and driving
    # past it costs what it paid, so a car whose speed is over the goal speed gains by slowing down).
    progress_along: str = "goal"
    # Condition-scaled shaping: each agent's progress_per_m is multiplied by
    # 1 + progress_urgency x (1 - alpha_coll / 3), so a condition that tolerates collisions (aggressive,
    # alpha_coll 0.2) is paid up to 1 + progress_urgency times more per metre than one that does not
    # (normal and cautious, 3.0): urgency that risk can buy (0: every condition paid alike).
    progress_urgency: float = 0.0
    # Training-only conflict shaping: each step, - risk_penalty x (alpha_coll / 3) x conflict_risk of the
    # state after it (how near the agent comes to another within risk_horizon s if both keep their
    # velocities), so the collision weight of the condition is felt before the collision, and a
    # condition that tolerates collisions (aggressive, 0.2) feels little of it (0: none).
    risk_penalty: float = 0.0
    risk_horizon: float = 2.0
    # Training-only collision weight: a policy agent's collision also costs collision_gain x alpha_coll
    # of its condition, so the collision term reads -((1 + gain) alpha_coll + 0.1 |v|): the condition's
    # collision weight, which barely moves the return beside the goal and the progress shaping, is
    # made to matter (aggressive, 0.2, pays little more; normal and cautious, 3.0, pay 3 x gain more).
    # Conditioned training only: the non-conditioned baseline keeps its fixed reward.
    collision_gain: float = 0.0
    # True: the gain grows with the condition's own weight, a collision costing
    # (1 + collision_gain x alpha_coll / 3) alpha_coll: the conditions that weigh collisions (normal and
    # cautious, 3.0) pay (1 + gain) alpha_coll as above, while one that tolerates them (aggressive, 0.2)
    # pays barely more than the paper's weight. A plain gain makes every condition collision-averse;
    # this one widens the contrast between conditions that the actor is to learn.
    collision_gain_by_weight: bool = False
    # Training-only comfort weight: policy agents pay comfort_scale x alpha_comfort per comfort violation
    # instead of alpha_comfort (1: the paper's reward). The comfort term is paid per step; at the
    # cautious style's 0.1 a hard stop costs about as much as the approach earns, and policies learn
    # not to brake rather than not to collide (BUILD_NOTES, session 17). Conditioned training only.
    comfort_scale: float = 1.0
    # Which violations comfort_scale applies to: "all", or "braking" (decelerating harder than 3 m/s^2,
    # and a longitudinal jerk below -5 m/s^3 on a step without a lateral one: the onset of braking);
    # under "braking" accelerating, steering and releasing the brake still cost the full weight.
    comfort_scope: str = "all"
    fixed_style: str = "normal"  # every agent's condition when not conditioned
    # PPO-Opponent: share of agents (per episode) driven by an opponent policy passed to `update`
    # (controller OTHER_POLICY), excluded from every loss and statistic.
    opponent_frac: float = 0.0
    # Mixed traffic: share of the eligible agents (per episode) that replay their logs (controller LOG)
    # instead of being driven by the policy, excluded from every loss and statistic; the policy then also
    # meets non-reactive traffic, as the benchmark's Expert regime and GPUDrive's log-replay partners.
    log_frac: float = 0.0
    # Mixed traffic: share of the agents (per episode) driven by the IDM controller along their lane
    # routes (controller IDM; needs SimConfig.enable_idm), out of the loss like log replay: reactive
    # rule-based traffic, as the benchmark's IDM regime.
    idm_frac: float = 0.0
    # SPICED-style human regularisation: + bc_coef x NLL of logged (tracked) actions on a batch
    # passed to `update` (cp_jax.rl.bc labels), in every minibatch step.
    bc_coef: float = 0.0

    def validate(self, sim: SimConfig) -> None:
        """Raise ValueError naming the field for inconsistent settings."""
        positive = ("num_envs", "rollout_steps", "update_epochs", "num_minibatches", "total_updates", "compact_groups",
                    "bank_groups")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"PPOConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.rollouts_per_scene < 1:
            raise ValueError(f"PPOConfig.rollouts_per_scene must be >= 1, got {self.rollouts_per_scene}")
        if not 0.0 < self.sample_capacity <= 1.0:
            raise ValueError(f"PPOConfig.sample_capacity must be in (0, 1], got {self.sample_capacity}")
        if self.num_envs % self.bank_groups:
            raise ValueError(f"PPOConfig.bank_groups ({self.bank_groups}) must divide num_envs ({self.num_envs})")
        if self.num_envs % self.compact_groups:
            raise ValueError(f"PPOConfig.compact_groups ({self.compact_groups}) must divide num_envs ({self.num_envs})")
        if self.capacity(sim) < self.num_minibatches * self.compact_groups:
            raise ValueError(
                f"PPOConfig.num_minibatches x compact_groups ({self.num_minibatches} x {self.compact_groups}) "
                f"exceeds the samples per update ({self.capacity(sim)} = sample_capacity x num_envs x rollout_steps "
                f"x max_agents)"
            )
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"PPOConfig.lr_schedule: unknown {self.lr_schedule!r}; use constant|linear|cosine")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"PPOConfig.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.lr <= 0 or self.clip_eps <= 0 or self.max_grad_norm <= 0:
            raise ValueError("PPOConfig.lr, clip_eps and max_grad_norm must be > 0")
        conditions.style(self.fixed_style)  # raises for an unknown style
        if not self.bc_coef >= 0.0:
            raise ValueError(f"PPOConfig.bc_coef must be >= 0, got {self.bc_coef}")
        if not 0.0 <= self.opponent_frac < 1.0:
            raise ValueError(f"PPOConfig.opponent_frac must be in [0, 1), got {self.opponent_frac}")
        if not (0.0 <= self.log_frac and self.opponent_frac + self.log_frac < 1.0):
            raise ValueError(f"PPOConfig.log_frac must be >= 0 with opponent_frac + log_frac < 1, got {self.log_frac}")
        if not (0.0 <= self.idm_frac and self.opponent_frac + self.log_frac + self.idm_frac < 1.0):
            raise ValueError("PPOConfig.idm_frac must be >= 0 with opponent_frac + log_frac + idm_frac < 1, "
                             f"got {self.idm_frac}")
        if self.idm_frac > 0.0 and not sim.enable_idm:
            raise ValueError("PPOConfig.idm_frac > 0 needs SimConfig.enable_idm=True (the IDM controller is "
                             "compiled out of step() without it)")
        if not 0.0 <= self.style_frac <= 1.0:
            raise ValueError(f"PPOConfig.style_frac must be in [0, 1], got {self.style_frac}")
        if not 0.0 <= self.shared_style_frac <= 1.0:
            raise ValueError(f"PPOConfig.shared_style_frac must be in [0, 1], got {self.shared_style_frac}")
        if not self.progress_per_m >= 0.0:
            raise ValueError(f"PPOConfig.progress_per_m must be >= 0, got {self.progress_per_m}")
        if not (self.risk_penalty >= 0.0 and self.risk_horizon > 0.0):
            raise ValueError("PPOConfig.risk_penalty must be >= 0 and risk_horizon > 0, got "
                             f"{self.risk_penalty}, {self.risk_horizon}")
        if not self.progress_urgency >= 0.0:
            raise ValueError(f"PPOConfig.progress_urgency must be >= 0, got {self.progress_urgency}")
        if not self.collision_gain >= 0.0:
            raise ValueError(f"PPOConfig.collision_gain must be >= 0, got {self.collision_gain}")
        if not self.comfort_scale >= 0.0:
            raise ValueError(f"PPOConfig.comfort_scale must be >= 0, got {self.comfort_scale}")
        if self.comfort_scope not in ("all", "braking"):
            raise ValueError(f"PPOConfig.comfort_scope must be 'all' or 'braking', got {self.comfort_scope!r}")
        if self.progress_along not in ("goal", "route", "route_goal"):
            raise ValueError(
                f"PPOConfig.progress_along must be 'goal', 'route' or 'route_goal', got {self.progress_along!r}")
        if not self.goal_radius_power > 0.0:
            raise ValueError(f"PPOConfig.goal_radius_power must be > 0, got {self.goal_radius_power}")
        low, high = self.goal_radius_range
        if not 0.0 < low <= high:
            raise ValueError(f"PPOConfig.goal_radius_range must be (low, high) with 0 < low <= high, got "
                             f"{self.goal_radius_range}")

    def capacity(self, sim: SimConfig) -> int:
        """Samples per update: sample_capacity x T x B x A, rounded down to whole minibatches of
        whole groups."""
        n = int(self.sample_capacity * self.num_envs * self.rollout_steps * sim.max_agents)
        return n - n % max(self.num_minibatches * self.compact_groups, 1)


@struct.dataclass
class Runner:
    """Everything an update reads and writes: a checkpoint is exactly this pytree."""

    params: Any
    opt_state: Any
    env: SimState  # [B, ...]
    scene_idx: jax.Array  # [B] int32 index into the bank
    carry: Any  # policy memory [B, A, ...] or None
    ep_return: jax.Array  # [B, A] return of the running episode so far
    adv_ewma: jax.Array  # [] EWMA of max |advantage| (advantage filtering)
    key: jax.Array  # [2] uint32
    update: jax.Array  # [] int32 updates done
    agent_steps: jax.Array  # [] float32 controlled agent-steps simulated (alive policy agents)


@struct.dataclass
class Batch:
    """One rollout, time-major [T, B, A, ...]."""

    obs: types.Obs
    carry: Any
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    boot_value: jax.Array  # V(final observation) where truncated, else 0
    valid: jax.Array


def make_optimizer(cfg: PPOConfig) -> optax.GradientTransformation:
    steps = cfg.total_updates * cfg.update_epochs * cfg.num_minibatches
    if cfg.lr_schedule == "linear":
        lr = optax.linear_schedule(cfg.lr, 0.0, steps)
    elif cfg.lr_schedule == "cosine":
        lr = optax.cosine_decay_schedule(cfg.lr, steps)
    else:
        lr = cfg.lr
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr, eps=1e-5))


def sample_conditions(key: jax.Array, shape: tuple[int, ...], cfg: PPOConfig) -> jax.Array:
    """Conditions [*shape, COND_DIM] (shape ends with the agent axis): sampled per agent (conditioned)
    or the fixed style; with cfg.style_frac > 0 that share of agents gets one of the five retry styles
    instead; with cfg.shared_style_frac > 0 that share of episodes (the axes before the agents') gets
    one retry style for all its agents."""
    styles = jnp.asarray(np.stack([conditions.STYLES[s] for s in conditions.RETRY_STYLES]))
    if cfg.conditioned and cfg.shared_style_frac > 0.0:
        key, k_use, k_which = jax.random.split(key, 3)
        cond = sample_conditions(key, shape, dataclasses.replace(cfg, shared_style_frac=0.0))
        named = styles[jax.random.randint(k_which, shape[:-1], 0, len(conditions.RETRY_STYLES))]
        use = jax.random.uniform(k_use, shape[:-1]) < cfg.shared_style_frac
        return jnp.where(use[..., None, None], named[..., None, :], cond)
    if cfg.conditioned and cfg.style_frac > 0.0:
        key, k_use, k_which = jax.random.split(key, 3)
        named = styles[jax.random.randint(k_which, shape, 0, len(conditions.RETRY_STYLES))]
        use = jax.random.uniform(k_use, shape) < cfg.style_frac
        sampled = sample_conditions(key, shape, dataclasses.replace(cfg, style_frac=0.0))
        return jnp.where(use[..., None], named, sampled)
    if cfg.conditioned and cfg.goal_radius_range == (2.0, 12.0) and cfg.goal_radius_power == 1.0:
        return conditions.sample(key, shape)  # DESIGN's ranges: the shipped runs' random stream
    if cfg.conditioned:
        k_cond, k_radius = jax.random.split(key)
        cond = conditions.sample(k_cond, shape)
        low, high = cfg.goal_radius_range
        u = jax.random.uniform(k_radius, shape) ** cfg.goal_radius_power
        return cond.at[..., 0].set(low + (high - low) * u)
    return jnp.broadcast_to(conditions.style(cfg.fixed_style), (*shape, types.COND_DIM))


def mixed_traffic(cfg: PPOConfig) -> bool:
    """Whether episodes draw per-agent controllers (opponents, log replay, IDM) instead of all POLICY."""
    return cfg.opponent_frac > 0.0 or cfg.log_frac > 0.0 or cfg.idm_frac > 0.0


def episode_controllers(key: jax.Array, cfg: PPOConfig, sim: SimConfig) -> jax.Array | None:
    """[B, A] controller ids for fresh episodes: OTHER_POLICY for a share cfg.opponent_frac of the
    agents, LOG for a share cfg.log_frac, IDM for a share cfg.idm_frac, POLICY for the rest; None
    (everyone POLICY, no key used) without any."""
    if not mixed_traffic(cfg):
        return None
    u = jax.random.uniform(key, (cfg.num_envs, sim.max_agents))
    edges = jnp.cumsum(jnp.array([cfg.opponent_frac, cfg.log_frac, cfg.idm_frac]))
    ids = jnp.array([types.OTHER_POLICY, types.LOG, types.IDM, types.POLICY], jnp.int32)
    return ids[jnp.searchsorted(edges, u, side="right")]


def _reset_batch(scenes: Scenario, keys: jax.Array, cond: jax.Array, controller, sim: SimConfig) -> SimState:
    if controller is None:
        return jax.vmap(lambda sc, k, c: env.reset(sc, k, c, sim))(scenes, keys, cond)
    return jax.vmap(lambda sc, k, c, ctrl: env.reset(sc, k, c, sim, ctrl))(scenes, keys, cond, controller)


def take_scenes(bank: Scenario, idx: jax.Array, cfg: PPOConfig) -> Scenario:
    """The envs' scenes [B, ...]: bank [S, ...] and idx [B] into it, or with cfg.bank_groups = G > 1
    a grouped bank [G, S / G, ...] (`env.group_bank`) and idx [B] into each env's own group."""
    return env.take_scenes(bank, idx, cfg.bank_groups, "PPOConfig.bank_groups")


def reset_envs(key: jax.Array, bank: Scenario, cfg: PPOConfig, sim: SimConfig):
    """Fresh episodes: B random scenes of the bank (of each env's group with cfg.bank_groups > 1),
    per-agent conditions. -> (SimState [B], idx [B])."""
    k_idx, k_cond, k_env = jax.random.split(key, 3)
    idx = jax.random.randint(k_idx, (cfg.num_envs,), 0, env.bank_size(bank, cfg.bank_groups))
    cond = sample_conditions(k_cond, (cfg.num_envs, sim.max_agents), cfg)
    controller = None
    if mixed_traffic(cfg):
        k_env, k_ctrl = jax.random.split(k_env)
        controller = episode_controllers(k_ctrl, cfg, sim)
    keys = jax.random.split(k_env, cfg.num_envs)
    return _reset_batch(take_scenes(bank, idx, cfg), keys, cond, controller, sim), idx


def init(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, key: jax.Array, bank: Scenario,
         mesh=None) -> Runner:
    """A fresh Runner: initial parameters, optimiser state, first episodes. With a mesh it is made by
    one jitted program straight onto `shard_runner`'s layout, which also works when the bank is
    sharded over hosts (bank_groups; no process holds all of it)."""
    cfg.validate(sim)
    if mesh is not None:
        fn = functools.partial(init, net, cfg, sim)
        batch, rest = parallel.batch_spec(mesh), parallel.replicated_spec(mesh)
        shardings = _place(jax.eval_shape(fn, key, bank), lambda x: jax.tree.map(lambda _: batch, x),
                           lambda x: jax.tree.map(lambda _: rest, x))
        return jax.jit(fn, out_shardings=shardings)(key, bank)
    k_params, k_env, key = jax.random.split(key, 3)
    params = networks.init_params(net.cfg, sim, k_params)
    state, idx = reset_envs(k_env, bank, cfg, sim)
    return Runner(
        params=params,
        opt_state=make_optimizer(cfg).init(params),
        env=state,
        scene_idx=idx,
        carry=networks.initial_carry(net.cfg, (cfg.num_envs, sim.max_agents)),
        ep_return=jnp.zeros((cfg.num_envs, sim.max_agents), jnp.float32),
        adv_ewma=jnp.zeros((), jnp.float32),
        key=key,
        update=jnp.zeros((), jnp.int32),
        agent_steps=jnp.zeros((), jnp.float32),
    )


_BATCH_FIELDS = ("env", "scene_idx", "carry", "ep_return")  # Runner fields with a leading [B] axis


def _place(runner: Runner, batch_fn, rest_fn) -> Runner:
    return runner.replace(**{f.name: (batch_fn if f.name in _BATCH_FIELDS else rest_fn)(getattr(runner, f.name))
                             for f in dataclasses.fields(runner)})


def start(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, key: jax.Array, bank: Scenario, mesh,
          params=None) -> Runner:
    """A runner on the mesh (envs split over its devices), from params if given (fresh optimiser).
    bank: the whole bank for cfg.bank_groups == 1; else grouped and sharded (`parallel.shard_groups`),
    which no process holds whole, so the runner is made straight onto the mesh."""
    grouped = cfg.bank_groups > 1
    runner = init(net, cfg, sim, key, bank, mesh=mesh if grouped else None)
    if params is not None:
        params = parallel.replicate(params, mesh) if grouped else params
        runner = runner.replace(params=params, opt_state=make_optimizer(cfg).init(params))
    return runner if grouped else shard_runner(runner, mesh)


def shard_runner(runner: Runner, mesh) -> Runner:
    """The runner on a device mesh (cp_jax.parallel): the B envs split over the devices, parameters,
    optimiser state, key and counters replicated. B must be a multiple of the device count."""
    parallel.check_divisible(runner.scene_idx.shape[0], mesh, "PPOConfig.num_envs")
    return _place(runner, lambda x: parallel.shard_batch(x, mesh), lambda x: parallel.replicate(x, mesh))


def gae(reward, value, terminated, truncated, boot_value, last_value, gamma: float, lam: float):
    """Advantages and returns [T, ...].

    reward, value, terminated, truncated, boot_value [T, ...]; last_value [...] = V of the
    observation after the last step. A terminated step has no bootstrap; a truncated one
    bootstraps from boot_value (V of its final observation, the env having restarted since);
    either ends the recursion.
    """

    def body(carry, x):
        next_value, next_adv = carry
        r, v, term, trunc, boot = x
        target = jnp.where(term, 0.0, jnp.where(trunc, boot, next_value))
        delta = r + gamma * target - v
        adv = delta + gamma * lam * (1.0 - (term | trunc).astype(jnp.float32)) * next_adv
        return (v, adv), adv

    init_carry = (last_value, jnp.zeros_like(last_value))
    xs = (reward, value, terminated, truncated, boot_value)
    _, adv = jax.lax.scan(body, init_carry, xs, reverse=True)
    return adv, adv + value


def clipped_surrogate(logp, old_logp, adv, w, clip_eps: float, norm_adv: bool = True):
    """PPO's clipped policy loss over samples [N] with weights w [N] summing to 1 (or 0 for none).

    Returns (loss [], approximate KL [], clip fraction []). norm_adv: advantages standardised with
    the same weights first."""
    log_ratio = logp - old_logp
    ratio = jnp.exp(log_ratio)
    if norm_adv:
        mean = jnp.sum(adv * w)
        std = jnp.sqrt(jnp.sum(w * (adv - mean) ** 2) + 1e-8)
        adv = (adv - mean) / std
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    return (jnp.sum(w * pg), jnp.sum(w * ((ratio - 1.0) - log_ratio)),
            jnp.sum(w * (jnp.abs(ratio - 1.0) > clip_eps)))


OUTCOME_KEYS = tuple(metrics.OUTCOMES)


def make_rollout(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, params: SimParams):
    """Returns `rollout(runner, scenes [B], opponent=None) -> (state, carry, ep_return, totals, key,
    Batch [T, B, A])`: rollout_steps of observe -> policy -> step for every env, restarting finished
    envs; OTHER_POLICY agents act from the opponent parameters (feed-forward)."""
    observe = jax.vmap(lambda s, sc: env.observe(s, sc, sim))
    shape = (cfg.num_envs, sim.max_agents)

    def restart(state: SimState, scenes: Scenario, done: jax.Array, key: jax.Array) -> SimState:
        """Envs where done [B] restart their scene from frame 0 with fresh conditions and keys."""
        k_cond, k_env = jax.random.split(key)
        cond = sample_conditions(k_cond, shape, cfg)
        controller = None
        if mixed_traffic(cfg):
            k_env, k_ctrl = jax.random.split(k_env)
            controller = episode_controllers(k_ctrl, cfg, sim)
        fresh = _reset_batch(scenes, jax.random.split(k_env, cfg.num_envs), cond, controller, sim)
        return jax.tree.map(lambda f, s: jnp.where(done.reshape(done.shape + (1,) * (s.ndim - 1)), f, s), fresh, state)

    def rollout(runner: Runner, scenes: Scenario, opponent=None):
        p = runner.params
        # the goals' arc lengths on their routes: fixed for the rollout (restarts keep the scene)
        goal = goal_arc(scenes, sim) if cfg.progress_per_m > 0.0 and cfg.progress_along == "route_goal" else None

        def body(c, _):
            state, carry, ep_ret, totals, key = c
            key, k_act, k_reset = jax.random.split(key, 3)
            obs = observe(state, scenes)
            logits, value, new_carry = net.apply(p, obs, carry)
            if opponent is not None:
                other = (state.controller == types.OTHER_POLICY)[..., None]
                logits = jnp.where(other, net.apply(opponent, obs, carry)[0], logits)
            action = dist.sample(k_act, logits)
            nxt, out = jax.vmap(lambda s, a, sc: env.step(s, a, sc, params, sim))(state, action, scenes)
            policy = state.controller == types.POLICY
            valid = out.active & policy
            if cfg.conditioned:
                rew = out.reward
            else:
                rew = reward_lib.fixed_reward(out.collided, out.offroad, out.at_goal)
            if cfg.progress_per_m > 0.0:
                along = progress(state, nxt, scenes, sim, cfg.progress_along, goal)
                rew = rew + progress_weight(state.cond, cfg) * along
            if cfg.risk_penalty > 0.0:
                rew = rew - risk_weight(state.cond, cfg) * conflict_risk(nxt, scenes, cfg.risk_horizon)
            if cfg.conditioned and cfg.collision_gain > 0.0:
                rew = rew - collision_extra(state.cond, cfg) * out.collided
            if cfg.conditioned and cfg.comfort_scale != 1.0:
                rew = rew + comfort_refund(state, nxt, sim, cfg)
            rew = jnp.where(valid, rew, 0.0)
            truncated = out.truncated & valid
            boot = jax.lax.cond(
                jnp.any(truncated),
                lambda: net.apply(p, observe(nxt, scenes), new_carry)[1],
                lambda: jnp.zeros(shape, jnp.float32),
            )
            ep_ret = ep_ret + rew
            # Episode end per env: no policy agent left, or the time limit.
            done = (nxt.t >= sim.episode_steps) | ~jnp.any(nxt.alive & policy, axis=1)  # [B]
            ended = policy & done[:, None]
            outcome = metrics.outcomes(nxt)
            totals = dict(
                totals,
                agents=totals["agents"] + ended.sum(),
                episode_return=totals["episode_return"] + jnp.sum(jnp.where(ended, ep_ret, 0.0)),
                **{k: totals[k] + jnp.sum(outcome[k] & ended) for k in OUTCOME_KEYS},
            )
            nxt = jax.lax.cond(jnp.any(done), lambda: restart(nxt, scenes, done, k_reset), lambda: nxt)
            ep_ret = jnp.where(done[:, None], 0.0, ep_ret)
            new_carry = networks.reset_carry(new_carry, jnp.broadcast_to(done[:, None], shape))
            batch = Batch(obs=obs, carry=carry, action=action, logp=dist.log_prob(logits, action), value=value,
                          reward=rew, terminated=out.terminated & valid, truncated=truncated, boot_value=boot,
                          valid=valid)
            return (nxt, new_carry, ep_ret, totals, key), batch

        totals = {k: jnp.zeros((), jnp.float32) for k in ("agents", "episode_return", *OUTCOME_KEYS)}
        init_c = (runner.env, runner.carry, runner.ep_return, totals, runner.key)
        (state, carry, ep_ret, totals, key), batch = jax.lax.scan(body, init_c, None, length=cfg.rollout_steps)
        return state, carry, ep_ret, totals, key, batch

    return rollout


def collision_extra(cond: jax.Array, cfg: PPOConfig) -> jax.Array:
    """[...] training-only extra cost of a collision for conditions [..., COND_DIM] (collision_gain)."""
    alpha = conditions.field(cond, "alpha_coll")
    scale = alpha / ALPHA_COLL_MAX if cfg.collision_gain_by_weight else 1.0
    return cfg.collision_gain * scale * alpha


def comfort_refund(state: SimState, nxt: SimState, sim: SimConfig, cfg: PPOConfig) -> jax.Array:
    """[B, A] (1 - comfort_scale) x alpha_comfort x the step's comfort violations in comfort_scope, from
    the accelerations env.step stored in state and nxt (the same kinematics its reward read)."""
    jerk_long = (nxt.accel - state.accel) / sim.dt
    jerk_lat = (nxt.lat_accel - state.lat_accel) / sim.dt
    if cfg.comfort_scope == "braking":
        lateral_jerk = jnp.abs(jerk_lat) > reward_lib.COMFORT_JERK
        events = (nxt.accel < -reward_lib.COMFORT_ACCEL).astype(jnp.float32) + (
            (jerk_long < -reward_lib.COMFORT_JERK) & ~lateral_jerk)
    else:
        events = reward_lib.comfort_events(nxt.accel, nxt.lat_accel, jerk_long, jerk_lat)
    return (1.0 - cfg.comfort_scale) * conditions.field(state.cond, "alpha_comfort") * events


def goal_distance(state: SimState, scenes: Scenario) -> jax.Array:
    """[B, A] distance (m) from every agent to its goal."""
    return jnp.linalg.norm(state.xy - scenes.goal, axis=-1)


def route_arc(state: SimState, scenes: Scenario, sim: SimConfig) -> jax.Array:
    """[B, A] arc length (m) along every agent's lane route at its position (controllers.route_arc)."""
    return jax.vmap(lambda sc, xy: controllers.route_arc(sc, xy, sim))(scenes, state.xy)


def goal_arc(scenes: Scenario, sim: SimConfig) -> jax.Array:
    """[B, A] arc length (m) of every agent's goal projected on its lane route (0 without a route)."""
    return jax.vmap(lambda sc: controllers.route_arc(sc, sc.goal, sim))(scenes)


def route_to_goal(state: SimState, scenes: Scenario, sim: SimConfig) -> jax.Array:
    """[B, A] distance (m) along every agent's lane route from its position to its goal's projection
    on the route, either side of it (0 without a route)."""
    return jnp.abs(route_arc(state, scenes, sim) - goal_arc(scenes, sim))


ALPHA_COLL_MAX = float(conditions.field(conditions.COND_HIGH, "alpha_coll"))  # DESIGN's range U(0, 3)


def progress_weight(cond: jax.Array, cfg: PPOConfig) -> jax.Array:
    """[...] shaping reward per metre of progress for conditions [..., COND_DIM]
    (PPOConfig.progress_urgency)."""
    tolerance = 1.0 - conditions.field(cond, "alpha_coll") / ALPHA_COLL_MAX
    return cfg.progress_per_m * (1.0 + cfg.progress_urgency * tolerance)


def risk_weight(cond: jax.Array, cfg: PPOConfig) -> jax.Array:
    """[...] conflict-shaping weight for conditions [..., COND_DIM]: risk_penalty x alpha_coll / 3."""
    return cfg.risk_penalty * conditions.field(cond, "alpha_coll") / ALPHA_COLL_MAX


def conflict_risk(state: SimState, scenes: Scenario, horizon: float) -> jax.Array:
    """[B, A] in [0, 1]: max over the other alive agents of exp(-(d / r)^2) x (1 - t / horizon), where
    t in [0, horizon] s is when the two centres come closest if both keep their velocities, d (m) how
    close, and r a quarter of the two lengths' sum (d = r: the boxes overlap; a queue 1.5 m apart
    scores ~0.001). 0 for agents not in the world."""
    heading = jnp.stack([jnp.cos(state.yaw), jnp.sin(state.yaw)], -1)
    vel = state.speed[..., None] * heading  # [B, A, 2]
    rel_p = state.xy[..., None, :, :] - state.xy[..., :, None, :]  # [B, A, A, 2]: j seen from i
    rel_v = vel[..., None, :, :] - vel[..., :, None, :]
    closing = -jnp.sum(rel_p * rel_v, -1) / jnp.maximum(jnp.sum(rel_v * rel_v, -1), 1e-6)
    t = jnp.clip(closing, 0.0, horizon)
    d = jnp.linalg.norm(rel_p + rel_v * t[..., None], axis=-1)
    length = scenes.size[..., 0]
    r = 0.25 * (length[..., :, None] + length[..., None, :])
    risk = jnp.exp(-jnp.square(d / jnp.maximum(r, 0.1))) * (1.0 - t / horizon)
    a = state.alive.shape[-1]
    pair = state.alive[..., :, None] & state.alive[..., None, :] & ~jnp.eye(a, dtype=bool)
    return jnp.max(jnp.where(pair, risk, 0.0), axis=-1)


def progress(state: SimState, nxt: SimState, scenes: Scenario, sim: SimConfig, along: str,
             goal: jax.Array | None = None) -> jax.Array:
    """[B, A] progress (m) of one step from state to nxt, as PPOConfig.progress_along measures it
    (goal: goal_arc(scenes, sim) when already computed)."""
    if along == "route":
        return route_arc(nxt, scenes, sim) - route_arc(state, scenes, sim)
    if along == "route_goal":
        goal = goal_arc(scenes, sim) if goal is None else goal
        return jnp.abs(route_arc(state, scenes, sim) - goal) - jnp.abs(route_arc(nxt, scenes, sim) - goal)
    return goal_distance(state, scenes) - goal_distance(nxt, scenes)


def group_envs(x: jax.Array, groups: int, mesh=None) -> jax.Array:
    """[T, B, A, ...] -> [G, T x B / G x A, ...]: group j holds envs j B / G .. (j + 1) B / G - 1
    (G = 1: the plain T, B, A flattening). With a mesh the groups are split over its devices."""
    t, b = x.shape[:2]
    x = jnp.moveaxis(x.reshape((t, groups, b // groups) + x.shape[2:]), 1, 0)
    return parallel.constrain(x.reshape((groups, -1) + x.shape[4:]), mesh)


def compact(tree, weight: jax.Array, key: jax.Array, capacity: int, groups: int = 1, mesh=None):
    """The update's K = capacity samples of a rollout, K / G from each group of envs (group_envs):
    the group's valid samples (weight > 0) first, in random order (a random subset if more are
    valid), then invalid fillers (weight 0).

    tree: pytree of [T, B, A, ...]; weight [T, B, A] -> (tree of [K, ...] group-major, number of
    valid samples dropped).
    """
    u = jax.random.uniform(key, (weight.size,)).reshape(weight.shape)
    ok = group_envs(weight, groups, mesh) > 0
    order = jnp.argsort(jnp.where(ok, 0.0, 2.0) + group_envs(u, groups, mesh), axis=1)
    idx = order[:, : capacity // groups]  # [G, K / G]

    def take(x):
        x = group_envs(x, groups, mesh)
        x = jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)
        return x.reshape((-1,) + x.shape[2:])

    data = parallel.constrain(jax.tree.map(take, tree), mesh)
    kept = jnp.take_along_axis(ok, idx, axis=1).sum()
    return data, ok.sum() - kept


def make_update(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, params: SimParams, mesh=None):
    """Returns the jitted `update(runner, bank, opponent=None, human=None) -> (runner, metrics)`;
    opponent: the parameters driving OTHER_POLICY agents (required when cfg.opponent_frac > 0);
    human: (Obs [M], action [M], weight [M]) logged driving for the bc_coef term (when > 0).
    mesh (cp_jax.parallel): data parallelism, the envs split over its devices (place the runner
    with `shard_runner` and the bank with `parallel.replicate`, or a grouped bank with
    `parallel.shard_groups`); None: wherever the inputs are. bank: [S, ...], or [G, S / G, ...] for
    cfg.bank_groups = G > 1 (`env.group_bank`)."""
    cfg.validate(sim)
    parallel.check_divisible(cfg.num_envs, mesh, "PPOConfig.num_envs")
    optimizer = make_optimizer(cfg)
    observe = jax.vmap(lambda s, sc: env.observe(s, sc, sim))
    shape = (cfg.num_envs, sim.max_agents)
    rollout = make_rollout(net, cfg, sim, params)

    def loss_fn(p, mb: Batch, adv, ret, weight, human=None):
        logits, value, _ = net.apply(p, mb.obs, mb.carry)
        w = weight / jnp.maximum(weight.sum(), 1.0)
        pg_loss, approx_kl, clip_frac = clipped_surrogate(dist.log_prob(logits, mb.action), mb.logp, adv, w,
                                                          cfg.clip_eps, cfg.norm_adv)
        v_clip = mb.value + jnp.clip(value - mb.value, -cfg.clip_eps, cfg.clip_eps)
        v_loss = 0.5 * jnp.maximum((value - ret) ** 2, (v_clip - ret) ** 2)
        ent = dist.entropy(logits)
        v_loss, ent = jnp.sum(w * v_loss), jnp.sum(w * ent)
        total = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * ent
        bc_stats = {}
        if human is not None:  # (obs [M], action [M], weight [M]) of logged driving
            h_logits = net.apply(p, human[0])[0]
            nll = jnp.sum(-dist.log_prob(h_logits, human[1]) * human[2]) / jnp.maximum(human[2].sum(), 1.0)
            total = total + cfg.bc_coef * nll
            bc_stats = dict(human_nll=nll)
        stats = dict(**bc_stats,
            policy_loss=pg_loss, value_loss=v_loss, entropy=ent, approx_kl=approx_kl, clip_frac=clip_frac,
        )
        return total, stats

    g = cfg.compact_groups

    def epochs(runner: Runner, data, key, human=None):
        """data: (Batch, adv, ret, weight) flattened to [K, ...] samples, group-major (K / G per
        group); human: logged-action batch or None. Each minibatch takes K / (G M) samples of every
        group, shuffled within the group (G = 1: one global shuffle)."""
        n, m = data[1].shape[0], cfg.num_minibatches

        def shuffle(x, k):
            if g == 1:
                return x[jax.random.permutation(k, n)].reshape((m, n // m) + x.shape[1:])
            perm = jax.vmap(jax.random.permutation, (0, None))(jax.random.split(k, g), n // g)  # [G, K / G]
            x = x.reshape((g, n // g) + x.shape[1:])
            x = jnp.take_along_axis(x, perm.reshape(perm.shape + (1,) * (x.ndim - 2)), axis=1)
            x = jnp.swapaxes(x.reshape((g, m, n // (g * m)) + x.shape[2:]), 0, 1)  # [M, G, K / (G M), ...]
            return x.reshape((m, n // m) + x.shape[3:])

        def epoch(c, k):
            shuffled = jax.tree.map(lambda x: shuffle(x, k), data)
            shuffled = parallel.constrain(shuffled, mesh, axis=1)  # each minibatch split over the devices

            def minibatch(c2, mb):
                p2, o2 = c2
                (_, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(p2, *mb, human)
                updates, o2 = optimizer.update(grads, o2, p2)
                stats["grad_norm"] = optax.tree.norm(grads)
                return (optax.apply_updates(p2, updates), o2), stats

            return jax.lax.scan(minibatch, c, shuffled)

        keys = jax.random.split(key, cfg.update_epochs)
        (p, o), stats = jax.lax.scan(epoch, (runner.params, runner.opt_state), keys)
        return p, o, jax.tree.map(jnp.mean, stats)

    @jax.jit
    def update(runner: Runner, bank: Scenario, opponent=None, human=None):
        if cfg.opponent_frac > 0.0 and opponent is None:
            raise ValueError("PPOConfig.opponent_frac > 0: pass the opponent's parameters to update")
        if (cfg.bc_coef > 0.0) != (human is not None):
            raise ValueError("PPOConfig.bc_coef > 0 needs update(..., human=(obs, action, weight)), and only then")
        scenes = parallel.constrain(take_scenes(bank, runner.scene_idx, cfg), mesh)
        state, carry, ep_return, totals, key, batch = rollout(runner, scenes, opponent)
        _, last_value, _ = net.apply(runner.params, observe(state, scenes), carry)
        adv, ret = gae(batch.reward, batch.value, batch.terminated, batch.truncated, batch.boot_value,
                       last_value, cfg.gamma, cfg.gae_lambda)

        valid = batch.valid
        weight = valid.astype(jnp.float32)
        max_adv = jnp.max(jnp.where(valid, jnp.abs(adv), 0.0))
        adv_ewma = jnp.where(runner.update == 0, max_adv,
                             cfg.adv_filter_beta * max_adv + (1 - cfg.adv_filter_beta) * runner.adv_ewma)
        if cfg.adv_filter:
            weight = weight * (jnp.abs(adv) >= cfg.adv_filter_frac * adv_ewma)

        key, k_compact, k_epochs, k_scene = jax.random.split(key, 4)
        data, dropped = compact((batch, adv, ret, weight), weight, k_compact, cfg.capacity(sim), g, mesh)
        new_params, opt_state, stats = epochs(runner, data, k_epochs, human)

        # Rollout statistics over valid samples.
        v_mask = valid.astype(jnp.float32)
        nv = jnp.maximum(v_mask.sum(), 1.0)
        ret_mean = jnp.sum(v_mask * ret) / nv
        var_ret = jnp.sum(v_mask * (ret - ret_mean) ** 2) / nv
        res = ret - batch.value
        var_res = jnp.sum(v_mask * (res - jnp.sum(v_mask * res) / nv) ** 2) / nv
        n_ep = jnp.maximum(totals["agents"], 1.0)
        stats.update(
            explained_variance=1.0 - var_res / jnp.maximum(var_ret, 1e-8),
            reward_per_step=jnp.sum(batch.reward) / nv,
            value_mean=jnp.sum(v_mask * batch.value) / nv,
            kept_frac=weight.sum() / nv,
            samples=data[3].sum(),
            dropped_frac=dropped / nv,
            episodes=totals["agents"],
            episode_return=totals["episode_return"] / n_ep,
            **{f"{k}_rate": totals[k] / n_ep for k in OUTCOME_KEYS},
        )

        # Every rollouts_per_scene updates, every env draws a new scene (running episodes truncated).
        switch = (runner.update + 1) % cfg.rollouts_per_scene == 0

        def new_scenes(_):
            s, idx = reset_envs(k_scene, bank, cfg, sim)
            return s, idx, networks.initial_carry(net.cfg, shape), jnp.zeros_like(ep_return)

        state, idx, carry, ep_return = jax.lax.cond(
            switch, new_scenes, lambda _: (state, runner.scene_idx, carry, ep_return), None
        )
        runner = runner.replace(
            params=new_params, opt_state=opt_state, env=state, scene_idx=idx, carry=carry, ep_return=ep_return,
            adv_ewma=adv_ewma, key=key, update=runner.update + 1, agent_steps=runner.agent_steps + v_mask.sum(),
        )
        if mesh is not None:  # the next update's inputs keep this layout
            runner = _place(runner, lambda x: parallel.constrain(x, mesh),
                            lambda x: parallel.constrain_replicated(x, mesh))
        return runner, stats

    return update


# ----------------------------------------------------------------------------- evaluation


def evaluate(
    net: networks.ActorCritic,
    net_params,
    bank: Scenario,
    cond: jax.Array,
    params: SimParams,
    sim: SimConfig,
    key: jax.Array,
    greedy: bool = True,
    at_fault: bool = False,
) -> dict[str, jax.Array]:
    """One episode on every scene of the bank, every controllable agent driven by the policy under
    cond [COND_DIM]. Returns per-agent outcome masks [N, A] ("goal", "collision", "offroad",
    "timeout"), "controlled" [N, A] and "mean_speed" [N, A] (|speed| averaged over alive steps);
    with at_fault also "at_fault" [N, A]: the agent caused its collision (the benchmark's classifier,
    cp_jax.bench.metrics.at_fault, applied to every agent as the ego)."""
    n = jax.tree.leaves(bank)[0].shape[0]
    run = _evaluator(net.cfg, sim, greedy, at_fault)
    final, controlled, speed, fault = run(net_params, bank, jnp.asarray(cond, jnp.float32), params,
                                          jax.random.split(key, n))
    out = {k: v & controlled for k, v in metrics.outcomes(final).items()}
    if at_fault:
        out["at_fault"] = fault & controlled
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
    at_fault: bool = True,
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
    runs = [jax.device_get(evaluate(net, net_params, bank, jnp.asarray(conds[w]), params, sim, key, greedy, at_fault))
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
    """evaluate()'s per-agent masks -> outcome rates over the controlled agents, their mean speed
    and how many there were (plain floats / int)."""
    result = jax.device_get(result)
    ctrl = np.asarray(result["controlled"])
    n = max(int(ctrl.sum()), 1)
    out = {k: float(np.asarray(result[k]).sum() / n) for k in (*metrics.OUTCOMES, "at_fault") if k in result}
    out["mean_speed"] = float(np.asarray(result["mean_speed"])[ctrl].mean()) if ctrl.any() else 0.0
    out["agents"] = int(ctrl.sum())
    return out


@functools.lru_cache(maxsize=16)
def _evaluator(net_cfg: networks.NetConfig, sim: SimConfig, greedy: bool, at_fault: bool = False):
    """evaluate()'s compiled body, one per (network, sim config, greedy, at_fault)."""
    from cp_jax.bench import metrics as bench_metrics  # the benchmark's at-fault classifier

    net = networks.ActorCritic(net_cfg)

    def one(net_params, scenario, cond, params, k):
        s0 = env.reset(scenario, k, cond, sim)

        def body(c, _):  # env.rollout's loop, carrying the policy memory (LSTM) too
            s, carry = c
            k_next, k_act = jax.random.split(s.key)
            s = s.replace(key=k_next)
            logits, _, carry = net.apply(net_params, env.observe(s, scenario, sim), carry)
            action = dist.greedy(logits) if greedy else dist.sample(k_act, logits)
            s_next, _ = env.step(s, action, scenario, params, sim)
            return (s_next, carry), (s if at_fault else (s.alive, s.speed))

        carry0 = networks.initial_carry(net.cfg, (sim.max_agents,))
        (final, _), states = jax.lax.scan(body, (s0, carry0), None, length=sim.episode_steps)
        alive, speed = (states.alive, states.speed) if at_fault else states
        mean_speed = jnp.sum(jnp.where(alive, jnp.abs(speed), 0.0), 0) / jnp.maximum(alive.sum(0), 1)
        fault = None
        if at_fault:
            rec = bench_metrics.record_from_states(bench_metrics.stack_states(states, final), final)
            fault = jax.vmap(lambda i: bench_metrics.at_fault(rec, scenario, i, sim))(jnp.arange(sim.max_agents))
        return final, s0.controller == types.POLICY, mean_speed, fault

    return jax.jit(jax.vmap(one, in_axes=(None, 0, None, None, 0)))
