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
    runner, metrics = update(runner, bank, shape_w)        # shape_w: rl/shaping.py (None: no shaping)
    runner = make_redraw(net, ppo_cfg, sim_cfg)(runner, new_bank)  # a streamed run's next bank

Terminated (removed on goal / collision / off-road) and truncated (time limit) are separate:
terminated cuts the bootstrap, truncated bootstraps from V of the final observation (computed on
the steps where some agent is truncated). Samples of agents that are not POLICY-controlled or not
alive before the step are masked out of every loss and statistic, and the update only processes
the first `sample_capacity` x T x B x A samples after moving valid ones to the front (a random
subset when more are valid; `dropped_frac` reports it), in `compact_groups` groups of whole envs
(a multiple of the device count keeps compaction and minibatches device-local). The LSTM variant
stores the carry of every step and re-applies one step from it in the update (no gradient through
time).

Why one module of ~590 lines: the algorithm reads top to bottom in one place (STYLE.md 1, purejaxrl's
ppo.py): config, runner, rollout, GAE, the loss, compaction and the update. Evaluation
(rl/evaluate.py) and the training-only shaping (rl/shaping.py) live beside it.
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
from cp_jax.rl import shaping
from cp_jax.sim import conditions, env, metrics, types
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
    conditioned: bool = True  # False: the non-conditioned baseline (fixed reward, fixed style)
    # Share of agents whose episode condition is one of the five named retry styles (2 m evaluation
    # goal radius) instead of a uniform sample over DESIGN's ranges (0: uniform sampling only).
    style_frac: float = 0.0
    fixed_style: str = "normal"  # every agent's condition when not conditioned
    # PPO-Opponent: share of agents (per episode) driven by an opponent policy passed to `update`
    # (controller OTHER_POLICY), excluded from every loss and statistic.
    opponent_frac: float = 0.0
    # Mixed traffic: share of the eligible agents (per episode) that replay their logs (controller LOG)
    # instead of being driven by the policy, excluded from every loss and statistic; the policy then also
    # meets non-reactive traffic, as the benchmark's Expert regime and GPUDrive's log-replay partners.
    log_frac: float = 0.0
    # SPICED-style human regularisation: + bc_coef x NLL of logged (tracked) actions on a batch
    # passed to `update` (cp_jax.rl.bc labels), in every minibatch step.
    bc_coef: float = 0.0
    # Start noise (`env.perturb_start`): each policy agent's episode starts up to start_offset m beside
    # its logged start, up to start_heading_deg askew and at 1 .. start_speed_scale x its logged speed
    # (real drivers start off the centreline and faster than procedural logs; 0, 0, 1: off).
    start_offset: float = 0.0
    start_heading_deg: float = 0.0
    start_speed_scale: float = 1.0

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
        if self.start_offset < 0.0 or self.start_heading_deg < 0.0 or self.start_speed_scale < 1.0:
            raise ValueError("PPOConfig.start_offset, start_heading_deg must be >= 0 and start_speed_scale >= 1, got "
                             f"{self.start_offset}, {self.start_heading_deg}, {self.start_speed_scale}")
        if not (0.0 <= self.log_frac and self.opponent_frac + self.log_frac < 1.0):
            raise ValueError(f"PPOConfig.log_frac must be >= 0 with opponent_frac + log_frac < 1, got {self.log_frac}")
        if not 0.0 <= self.style_frac <= 1.0:
            raise ValueError(f"PPOConfig.style_frac must be in [0, 1], got {self.style_frac}")

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
    """Conditions [*shape, COND_DIM]: sampled per agent over DESIGN's ranges (conditioned; a share
    cfg.style_frac of the agents gets one of the five retry styles instead) or the fixed style."""
    if not cfg.conditioned:
        return jnp.broadcast_to(conditions.style(cfg.fixed_style), (*shape, types.COND_DIM))
    if cfg.style_frac == 0.0:
        return conditions.sample(key, shape)
    styles = jnp.asarray(np.stack([conditions.STYLES[s] for s in conditions.RETRY_STYLES]))
    key, k_use, k_which = jax.random.split(key, 3)
    named = styles[jax.random.randint(k_which, shape, 0, len(conditions.RETRY_STYLES))]
    use = jax.random.uniform(k_use, shape) < cfg.style_frac
    return jnp.where(use[..., None], named, conditions.sample(key, shape))


def mixed_traffic(cfg: PPOConfig) -> bool:
    """Whether episodes draw per-agent controllers (opponents, log replay) instead of all POLICY."""
    return cfg.opponent_frac > 0.0 or cfg.log_frac > 0.0


def episode_controllers(key: jax.Array, cfg: PPOConfig, sim: SimConfig) -> jax.Array | None:
    """[B, A] controller ids for fresh episodes: OTHER_POLICY for a share cfg.opponent_frac of the
    agents, LOG for a share cfg.log_frac, POLICY for the rest; None (everyone POLICY, no key used)
    without either."""
    if not mixed_traffic(cfg):
        return None
    u = jax.random.uniform(key, (cfg.num_envs, sim.max_agents))
    edges = jnp.cumsum(jnp.array([cfg.opponent_frac, cfg.log_frac]))
    ids = jnp.array([types.OTHER_POLICY, types.LOG, types.POLICY], jnp.int32)
    return ids[jnp.searchsorted(edges, u, side="right")]


def _reset_batch(scenes: Scenario, keys: jax.Array, cond: jax.Array, controller, sim: SimConfig,
                 cfg: PPOConfig) -> SimState:
    if controller is None:
        state = jax.vmap(lambda sc, k, c: env.reset(sc, k, c, sim))(scenes, keys, cond)
    else:
        state = jax.vmap(lambda sc, k, c, ctrl: env.reset(sc, k, c, sim, ctrl))(scenes, keys, cond, controller)
    if (cfg.start_offset, cfg.start_heading_deg, cfg.start_speed_scale) == (0.0, 0.0, 1.0):
        return state
    noise = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)  # the episode's own key stream is unchanged
    return jax.vmap(lambda s, sc, k: env.perturb_start(s, sc, k, cfg.start_offset, np.radians(cfg.start_heading_deg),
                                                       cfg.start_speed_scale, sim))(state, scenes, noise)


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
    return _reset_batch(take_scenes(bank, idx, cfg), keys, cond, controller, sim, cfg), idx


def init(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, key: jax.Array, bank: Scenario,
         mesh=None) -> Runner:
    """A fresh Runner: initial parameters, optimiser state, first episodes, made by one jitted program
    (one compile, not one per operation). With a mesh it is made straight onto `shard_runner`'s layout,
    which also works when the bank is sharded over hosts (bank_groups; no process holds all of it)."""
    cfg.validate(sim)
    fn = functools.partial(_fresh, net, cfg, sim)
    if mesh is None:
        return jax.jit(fn)(key, bank)
    batch, rest = parallel.batch_spec(mesh), parallel.replicated_spec(mesh)
    shardings = _place(jax.eval_shape(fn, key, bank), lambda x: jax.tree.map(lambda _: batch, x),
                       lambda x: jax.tree.map(lambda _: rest, x))
    return jax.jit(fn, out_shardings=shardings)(key, bank)


def _fresh(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, key: jax.Array, bank: Scenario) -> Runner:
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


def make_redraw(net: networks.ActorCritic, cfg: PPOConfig, sim: SimConfig, mesh=None):
    """The jitted `redraw(runner, bank) -> runner`: every env draws a scene of a new bank (same shape as
    the old) and starts a fresh episode, as at a scene switch (running episodes are dropped; the last
    update already bootstrapped them); the key advances. For runs whose bank is refreshed from a stream."""

    @jax.jit
    def redraw(runner: Runner, bank: Scenario) -> Runner:
        key, k_scene = jax.random.split(runner.key)
        state, idx = reset_envs(k_scene, bank, cfg, sim)
        runner = runner.replace(env=state, scene_idx=idx, key=key, ep_return=jnp.zeros_like(runner.ep_return),
                                carry=networks.initial_carry(net.cfg, (cfg.num_envs, sim.max_agents)))
        if mesh is not None:
            runner = _place(runner, lambda x: parallel.constrain(x, mesh),
                            lambda x: parallel.constrain_replicated(x, mesh))
        return runner

    return redraw


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
    """Returns `rollout(runner, scenes [B], shape_w, opponent=None) -> (state, carry, ep_return, totals,
    key, Batch [T, B, A])`: rollout_steps of observe -> policy -> step for every env, restarting
    finished envs; the policy agents' reward is the condition's (or the fixed one) plus the training
    shaping weights `shape_w` (rl/shaping.py); OTHER_POLICY agents act from the opponent parameters (feed-forward)."""
    observe = jax.vmap(lambda s, sc: env.observe(s, sc, sim))
    shape_ba = (cfg.num_envs, sim.max_agents)

    def restart(state: SimState, scenes: Scenario, done: jax.Array, key: jax.Array) -> SimState:
        """Envs where done [B] restart their scene from frame 0 with fresh conditions and keys."""
        k_cond, k_env = jax.random.split(key)
        cond = sample_conditions(k_cond, shape_ba, cfg)
        controller = None
        if mixed_traffic(cfg):
            k_env, k_ctrl = jax.random.split(k_env)
            controller = episode_controllers(k_ctrl, cfg, sim)
        fresh = _reset_batch(scenes, jax.random.split(k_env, cfg.num_envs), cond, controller, sim, cfg)
        return jax.tree.map(lambda f, s: jnp.where(done.reshape(done.shape + (1,) * (s.ndim - 1)), f, s), fresh, state)

    def rollout(runner: Runner, scenes: Scenario, shape_w: shaping.Shaping, opponent=None):
        goal = shaping.goal_arc(scenes, sim)  # the goals' arc lengths on their routes (restarts keep the scene)

        def act(p, obs, state, key, carry=None):  # OTHER_POLICY agents act from the opponent's parameters
            logits, value, new_carry = net.apply(p, obs, carry)
            if opponent is not None:
                other = (state.controller == types.OTHER_POLICY)[..., None]
                logits = jnp.where(other, net.apply(opponent, obs, carry)[0], logits)
            return env.Act(dist.sample(key, logits), new_carry, (logits, value))

        def body(c, _):
            state, carry, ep_ret, totals, key = c
            key, k_act, k_reset = jax.random.split(key, 3)
            nxt, out, obs, (action, new_carry, (logits, value)) = env.policy_step(
                act, runner.params, state, scenes, params, sim, k_act, carry)
            policy = state.controller == types.POLICY
            valid = out.active & policy
            rew = out.reward if cfg.conditioned else reward_lib.fixed_reward(out.collided, out.offroad, out.at_goal)
            rew = jnp.where(valid, shaping.add(rew, shape_w, state, nxt, out.collided, scenes, sim, goal), 0.0)
            truncated = out.truncated & valid
            boot = jax.lax.cond(
                jnp.any(truncated),
                lambda: net.apply(runner.params, observe(nxt, scenes), new_carry)[1],
                lambda: jnp.zeros(shape_ba, jnp.float32),
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
            new_carry = networks.reset_carry(new_carry, jnp.broadcast_to(done[:, None], shape_ba))
            batch = Batch(obs=obs, carry=carry, action=action, logp=dist.log_prob(logits, action), value=value,
                          reward=rew, terminated=out.terminated & valid, truncated=truncated, boot_value=boot,
                          valid=valid)
            return (nxt, new_carry, ep_ret, totals, key), batch

        totals = {k: jnp.zeros((), jnp.float32) for k in ("agents", "episode_return", *OUTCOME_KEYS)}
        init_c = (runner.env, runner.carry, runner.ep_return, totals, runner.key)
        (state, carry, ep_ret, totals, key), batch = jax.lax.scan(body, init_c, None, length=cfg.rollout_steps)
        return state, carry, ep_ret, totals, key, batch

    return rollout


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
    """Returns the jitted `update(runner, bank, shape_w=None, opponent=None, human=None) -> (runner, metrics)`;
    shape_w: the training-only reward shaping (rl/shaping.py; None: the paper's reward alone);
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
    env_shape = (cfg.num_envs, sim.max_agents)
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
    def update(runner: Runner, bank: Scenario, shape_w: shaping.Shaping | None = None, opponent=None, human=None):
        if cfg.opponent_frac > 0.0 and opponent is None:
            raise ValueError("PPOConfig.opponent_frac > 0: pass the opponent's parameters to update")
        if (cfg.bc_coef > 0.0) != (human is not None):
            raise ValueError("PPOConfig.bc_coef > 0 needs update(..., human=(obs, action, weight)), and only then")
        scenes = parallel.constrain(take_scenes(bank, runner.scene_idx, cfg), mesh)
        shape_w = shaping.none() if shape_w is None else shape_w
        state, carry, ep_return, totals, key, batch = rollout(runner, scenes, shape_w, opponent)
        _, last_value, _ = net.apply(runner.params, observe(state, scenes), carry)
        adv, ret = gae(batch.reward, batch.value, batch.terminated, batch.truncated, batch.boot_value,
                       last_value, cfg.gamma, cfg.gae_lambda)

        valid = batch.valid
        weight = valid.astype(jnp.float32)

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
            return s, idx, networks.initial_carry(net.cfg, env_shape), jnp.zeros_like(ep_return)

        state, idx, carry, ep_return = jax.lax.cond(
            switch, new_scenes, lambda _: (state, runner.scene_idx, carry, ep_return), None
        )
        runner = runner.replace(
            params=new_params, opt_state=opt_state, env=state, scene_idx=idx, carry=carry, ep_return=ep_return,
            key=key, update=runner.update + 1, agent_steps=runner.agent_steps + v_mask.sum(),
        )
        if mesh is not None:  # the next update's inputs keep this layout
            runner = _place(runner, lambda x: parallel.constrain(x, mesh),
                            lambda x: parallel.constrain_replicated(x, mesh))
        return runner, stats

    return update
