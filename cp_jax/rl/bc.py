"""Behaviour cloning on logged motion: the benchmark's "SMART stand-in (BC)" traffic policy.

No SMART weights exist offline, so the SMART regime is driven by a policy cloned from the logs. The
logs hold poses, not actions, so the expert's actions are recovered first, then the policy's own
network is fitted to them with cross-entropy.

**Labels (closed-loop tracking).** Between the action and the bicycle sits the actuator
(`dynamics.actuate`): the actual acceleration and the steering position follow the command with a
first-order lag (0.3 per step) and the steering is scaled down at speed. Inverting the log one
transition at a time (`dynamics.inverse_log`, then `inverse_actuate`, then the nearest grid point)
asks for commands 1 / lag = 3.3x the wanted change, which the 7 x 13 grid can only approximate, so
the quantisation error accumulates and the result dithers between grid extremes. Instead every
controllable agent is *simulated* from its logged pose at t = 0 with the actuator at rest
(accel = steer = 0, exactly as `env.reset` starts a policy agent, so the first label is made in the
state the policy will see), and at each step the label is the grid action whose command, held for
`horizon` steps through the real actuator and bicycle, stays closest to the next `horizon` logged
poses (squared position error + w_yaw x yaw error^2 + w_speed x speed error^2, summed over the
horizon, + w_smooth x the squared change of command from the actuator state, which also breaks the
ties at standstill where every steering command does the same). The chosen action is applied for
one step and the search repeats from the new state: a small model-predictive tracker over the 91
actions. Labels are therefore the commands of a driver in exactly the policy's dynamics, at the
states that driver actually reaches (not at the logged poses), and position drift is corrected
instead of accumulated. `factored` (default) searches the 7 accelerations first (steering held;
speed does not depend on it), then the 13 steerings under the chosen one: 20 rollouts instead of
91, with the same tracking error on the procedural banks.

Measured on the 112 procedural training scenes (1,024 agents, 9 s logs; launch.train_bc writes it
to labels.json): mean distance to the log after 9 s 0.139 m (p95 0.28 m, max 0.62 m), mean over the
log 0.138 m. The one-step inverse above, replayed open loop, ends 15.1 m away on average (max 87 m);
the same inverse applied closed loop (from the simulated state each step) 0.49 m (max 7.9 m).

**Recovery data (optional noisy passes).** Cloning only on-log states leaves the policy without
examples of how to come back once it drifts. Each extra pass re-runs the tracker while a random
perturbation occasionally replaces the *executed* command for a few steps (grid offsets up to
`noise_max`, started with probability `noise_prob` per step, held for `noise_steps`); the *label*
stays the tracker's choice, so those samples show how to return to the log (the idea of DART,
Laskey et al. 2017). The tracking error reported in `tracking_stats` is from the noise-free pass.

**Observations.** `env.observe`'s row for the agent at the state where it acted: its simulated pose
and speed, its actuator state (accel / 4 and steering position in the ego block), every other agent
at its logged pose (log replay, alive where its log is valid), the condition slot set to the named
style (normal: the non-conditioned network ignores it). Each (step, agent) sample is observed in its
own world (`observe_agents` on one-scene batches), so others are never seen at their tracked poses.

**Samples** are valid for agents `env.default_controllers` would give the policy under that style,
at steps whose log is valid from t = 0 up to the target step, and while the tracker is within
`max_track_error` of the log. Padding and invalid samples carry weight 0.

**Training.** Cross-entropy on the 91-way labels, optax Adam (global-norm clipping, constant /
linear / cosine learning rate), one jitted epoch: a permutation of the (padded) dataset scanned in
minibatches with `lax.scan`. Only the actor is trained; the critic head keeps its initial weights
(its output is meaningless, and nothing reads it: the benchmark acts greedily on the logits).

    bc_cfg = BCConfig()
    data, stats = make_dataset(bank, types.default_params(), sim, bc_cfg, key)      # host numpy
    epoch = make_epoch(net, bc_cfg, make_optimizer(bc_cfg, steps))
    params, opt_state, metrics = epoch(params, opt_state, pad(data, bc_cfg.batch_size), key)
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cp_jax.policy import networks
from cp_jax.sim import conditions, dynamics, env, types
from cp_jax.sim.types import Obs, Scenario, SimConfig, SimParams


@dataclasses.dataclass(frozen=True)
class BCConfig:
    """Static behaviour-cloning settings (hashable): labelling, recovery passes, training."""

    # Labelling: hold each candidate command for `horizon` steps, cost against the log.
    horizon: int = 8
    factored: bool = True  # search the 7 accelerations, then the 13 steerings (20 rollouts, not 91)
    w_yaw: float = 4.0  # m^2 per rad^2 of yaw error
    w_speed: float = 0.25  # m^2 per (m/s)^2 of speed error
    w_smooth: float = 1e-3  # m^2 per squared command change ((accel / 4)^2 + steer^2): smoothness, tie-break
    max_track_error: float = 5.0  # m: samples where the tracker is farther from the log are dropped
    style: str = "normal"  # condition slot of the observations and the eligibility radius
    # Recovery passes (0 = noise-free labels only).
    noisy_passes: int = 1
    noise_prob: float = 0.05  # per step: chance that a perturbation starts (when none is running)
    noise_steps: int = 10  # steps a perturbation lasts
    noise_max: int = 2  # max |offset| of the perturbation in grid indices (accel and steer)
    # Training.
    epochs: int = 16
    batch_size: int = 1024
    lr: float = 1e-3
    lr_schedule: str = "cosine"  # constant | linear | cosine (over all epochs)
    max_grad_norm: float = 1.0
    scene_chunk: int = 8  # scenes labelled and observed per compiled call (memory vs calls)

    def __post_init__(self):
        self.validate()

    def validate(self, prefix: str = "BCConfig.") -> None:
        """Raise ValueError naming the first bad field (as prefix + name)."""
        for name in ("horizon", "epochs", "batch_size", "scene_chunk", "noise_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{prefix}{name} must be an int >= 1, got {value!r}")
        for name in ("noisy_passes", "noise_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{prefix}{name} must be an int >= 0, got {value!r}")
        if not isinstance(self.factored, bool):
            raise ValueError(f"{prefix}factored must be a bool, got {self.factored!r}")
        for name in ("w_yaw", "w_speed", "w_smooth", "max_grad_norm"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{prefix}{name} must be >= 0, got {getattr(self, name)!r}")
        if not self.max_track_error > 0:
            raise ValueError(f"{prefix}max_track_error must be > 0, got {self.max_track_error!r}")
        if not 0.0 <= self.noise_prob <= 1.0:
            raise ValueError(f"{prefix}noise_prob must be in [0, 1], got {self.noise_prob!r}")
        if not self.lr > 0:
            raise ValueError(f"{prefix}lr must be > 0, got {self.lr!r}")
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"{prefix}lr_schedule must be constant, linear or cosine, got {self.lr_schedule!r}")
        if self.style not in conditions.STYLES:
            raise ValueError(f"{prefix}style: unknown {self.style!r}; known: {sorted(conditions.STYLES)}")


@struct.dataclass
class Track:
    """Closed-loop labels of one scene. N = cfg.episode_steps; index t of a state = before step t."""

    action: jax.Array  # [A, N] int32 the expert's label for step t -> t + 1
    executed: jax.Array  # [A, N] int32 the command applied (differs from the label under noise)
    xy: jax.Array  # [A, N + 1, 2] tracked poses
    yaw: jax.Array  # [A, N + 1]
    speed: jax.Array  # [A, N + 1]
    accel: jax.Array  # [A, N + 1] actuator state (SimState.accel)
    steer: jax.Array  # [A, N + 1] steering position (SimState.steer)
    err: jax.Array  # [A, N + 1] distance to the logged position (0 where the log is invalid)
    valid: jax.Array  # [A, N] bool: a training sample
    tracked: jax.Array  # [A] bool: eligible with a log valid through step N (tracking statistics)


@struct.dataclass
class Dataset:
    """Flat behaviour-cloning samples [M, ...] (numpy on the host or arrays on the device)."""

    obs: Obs
    action: jax.Array  # [M] int32
    weight: jax.Array  # [M] float32, 0 = padding / invalid


def track_log(
    scenario: Scenario, params: SimParams, cfg: SimConfig, bc: BCConfig, key: jax.Array, noise_prob: jax.Array
) -> Track:
    """Closed-loop expert labels for every agent slot of one scene (module docstring). noise_prob []
    is an array (0 for the noise-free pass), so clean and noisy passes share one compiled program."""
    n_acc, n_str = params.accel_grid.shape[0], params.steer_grid.shape[0]
    n_act = n_acc * n_str
    a, t_log, n = cfg.max_agents, cfg.log_steps, cfg.episode_steps
    cand_a, cand_u = dynamics.decode_discrete(jnp.arange(n_act), params.accel_grid, params.steer_grid)  # [K]
    length = scenario.size[:, 0]
    log_ok = scenario.log_valid & scenario.agent_valid[:, None]
    log_v = dynamics.log_speed(scenario.log_vel, scenario.log_yaw)

    def move(xy, yaw, v, acc, u, cmd_a, cmd_u, lengths):
        """One env.step of a policy agent: actuator, then bicycle (rows [R])."""
        acc, u, delta = dynamics.actuate(cmd_a, cmd_u, acc, u, v, lengths, params.wheelbase_frac,
                                         params.actuator_lag, params.max_lat_accel, params.steer_grid[-1])
        xy, yaw, v1 = dynamics.bicycle_step(xy, yaw, v, acc, delta, lengths, params.wheelbase_frac,
                                            params.max_speed, params.max_reverse, cfg.dt)
        return xy, yaw, v1, dynamics.settle(acc, v, v1, cfg.dt), u

    def lookahead_cost(state, t, cmd_a, cmd_u):
        """[A, K]: each agent's K candidate commands cmd_a, cmd_u [A, K], held for `horizon` steps from
        state ([A] each), against the log."""
        k = cmd_a.shape[1]
        s = tuple(jnp.repeat(x, k, axis=0) for x in state)  # [A * K], agent-major
        lengths = jnp.repeat(length, k)
        # Command change from the actuator state: prefers smooth commands and breaks ties (at standstill
        # every steering command costs the same; without it the first, full left lock, would win).
        cost = bc.w_smooth * (jnp.square((cmd_a - state[3][:, None]) / 4.0) + jnp.square(cmd_u - state[4][:, None]))
        for h in range(1, bc.horizon + 1):
            s = move(*s, cmd_a.reshape(-1), cmd_u.reshape(-1), lengths)
            idx = jnp.minimum(t + h, t_log - 1)
            w = (t + h <= t_log - 1) & log_ok[:, idx]  # [A]
            d_xy = s[0].reshape(a, k, 2) - scenario.log_xy[:, idx][:, None, :]
            d_yaw = dynamics.wrap_angle(s[1].reshape(a, k) - scenario.log_yaw[:, idx][:, None])
            d_v = s[2].reshape(a, k) - log_v[:, idx][:, None]
            step_cost = jnp.sum(d_xy * d_xy, -1) + bc.w_yaw * d_yaw * d_yaw + bc.w_speed * d_v * d_v
            cost = cost + jnp.where(w[:, None], step_cost, 0.0)
        return cost

    def choose(state, t):
        """Label [A]: the best grid action (joint search over all, or acceleration then steering)."""
        if not bc.factored:
            full = lambda x: jnp.broadcast_to(x, (a, n_act))  # noqa: E731
            return jnp.argmin(lookahead_cost(state, t, full(cand_a), full(cand_u)), -1).astype(jnp.int32)
        # Acceleration row first, steering held at its current position (speed does not depend on steering) ...
        acc_grid, str_grid = params.accel_grid, params.steer_grid
        cost_a = lookahead_cost(state, t, jnp.broadcast_to(acc_grid, (a, n_acc)),
                                jnp.broadcast_to(state[4][:, None], (a, n_acc)))
        i_a = jnp.argmin(cost_a, -1)
        # ... then the steering column under that acceleration.
        cost_s = lookahead_cost(state, t, jnp.broadcast_to(acc_grid[i_a][:, None], (a, n_str)),
                                jnp.broadcast_to(str_grid, (a, n_str)))
        return (i_a * n_str + jnp.argmin(cost_s, -1)).astype(jnp.int32)

    def body(carry, t):
        state, noise_left, offset, k = carry
        label = choose(state, t)  # [A]
        k, k_start, k_off = jax.random.split(k, 3)
        start = (noise_left == 0) & (jax.random.uniform(k_start, (a,)) < noise_prob)
        new_off = jax.random.randint(k_off, (a, 2), -bc.noise_max, bc.noise_max + 1)
        offset = jnp.where(start[:, None], new_off, offset)
        noise_left = jnp.where(start, bc.noise_steps, noise_left)
        shift = jnp.where((noise_left > 0)[:, None], offset, 0)
        i_a = jnp.clip(label // n_str + shift[:, 0], 0, n_acc - 1)
        i_s = jnp.clip(label % n_str + shift[:, 1], 0, n_str - 1)
        executed = (i_a * n_str + i_s).astype(jnp.int32)
        cmd_a, cmd_u = dynamics.decode_discrete(executed, params.accel_grid, params.steer_grid)
        new_state = move(*state, cmd_a, cmd_u, length)
        return (new_state, jnp.maximum(noise_left - 1, 0), offset, k), (label, executed, state)

    zeros = jnp.zeros((a,), jnp.float32)
    state0 = (scenario.log_xy[:, 0], scenario.log_yaw[:, 0], log_v[:, 0], zeros, zeros)  # env.reset's actuator
    carry0 = (state0, jnp.zeros((a,), jnp.int32), jnp.zeros((a, 2), jnp.int32), key)
    (final, *_), (label, executed, states) = jax.lax.scan(body, carry0, jnp.arange(n))
    # states: tuple of [N, A, ...] (before each step) -> append the final state -> [A, N + 1, ...]
    xy, yaw, v, acc, u = (jnp.moveaxis(jnp.concatenate([s, f[None]], 0), 0, 1)
                          for s, f in zip(states, final, strict=True))

    err = jnp.where(log_ok[:, : n + 1], jnp.linalg.norm(xy - scenario.log_xy[:, : n + 1], axis=-1), 0.0)
    cond = jnp.broadcast_to(conditions.style(bc.style), (a, types.COND_DIM))
    eligible = env.default_controllers(scenario, cond) == types.POLICY
    prefix_ok = jnp.cumprod(log_ok.astype(jnp.int32), axis=1).astype(bool)  # valid from t = 0 on
    valid = eligible[:, None] & prefix_ok[:, 1 : n + 1] & (err[:, :n] <= bc.max_track_error)
    return Track(action=label.T, executed=executed.T, xy=xy, yaw=yaw, speed=v, accel=acc, steer=u, err=err,
                 valid=valid, tracked=eligible & prefix_ok[:, n])


def observe_track(scenario: Scenario, track: Track, cfg: SimConfig, style: str = "normal") -> Obs:
    """Observations [A, N, ...] of each agent at its tracked states (module docstring): row (i, t) is
    env.observe's row i of the world at log step t with agent i replaced by its tracked state."""
    a, n = cfg.max_agents, cfg.episode_steps
    cond = jnp.broadcast_to(conditions.style(style), (a, types.COND_DIM))
    base = env.reset(scenario, jax.random.PRNGKey(0), cond, cfg)
    log_v = dynamics.log_speed(scenario.log_vel, scenario.log_yaw)
    zeros = jnp.zeros((a,), jnp.float32)
    one_scene = jax.tree.map(lambda x: x[None], scenario)

    def row(i, t):
        state = base.replace(
            t=t,
            xy=scenario.log_xy[:, t].at[i].set(track.xy[i, t]),
            yaw=scenario.log_yaw[:, t].at[i].set(track.yaw[i, t]),
            speed=log_v[:, t].at[i].set(track.speed[i, t]),
            accel=zeros.at[i].set(track.accel[i, t]),
            steer=zeros.at[i].set(track.steer[i, t]),
            alive=(scenario.agent_valid & scenario.log_valid[:, t]).at[i].set(True),
        )
        obs = env.observe_agents(jax.tree.map(lambda x: x[None], state), one_scene, jnp.zeros((1,), jnp.int32),
                                 i[None], cfg)
        return jax.tree.map(lambda x: x[0], obs)

    return jax.vmap(lambda i: jax.vmap(lambda t: row(i, t))(jnp.arange(n)))(jnp.arange(a))


@functools.lru_cache(maxsize=8)
def _scene_fn(cfg: SimConfig, bc: BCConfig):
    """Compiled once per (cfg, bc): scenes [c], keys [c], SimParams, noise_prob [] -> (Obs, Track) [c, ...]."""

    def one(scenario, key, params, noise_prob):
        track = track_log(scenario, params, cfg, bc, key, noise_prob)
        return observe_track(scenario, track, cfg, bc.style), track

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))


def make_dataset(
    bank: Scenario, params: SimParams, cfg: SimConfig, bc: BCConfig, key: jax.Array, noisy: bool = True
) -> tuple[Dataset, dict]:
    """Label and observe every scene of bank [S, ...]: one noise-free pass plus bc.noisy_passes noisy
    ones (when noisy). Returns (Dataset of the valid samples as host numpy [M, ...], statistics: sample
    counts and the noise-free pass's tracking errors, see `tracking_stats`)."""
    if not cfg.discrete_actions:
        raise ValueError("behaviour cloning labels discrete actions: SimConfig.discrete_actions must be True")
    num_scenes = jax.tree.leaves(bank)[0].shape[0]
    fn = _scene_fn(cfg, bc)
    passes = 1 + (bc.noisy_passes if noisy else 0)
    parts, errs, tracked, labels = [], [], [], []
    for p in range(passes):
        noise = jnp.asarray(0.0 if p == 0 else bc.noise_prob, jnp.float32)
        pass_key = jax.random.fold_in(key, p)
        for lo in range(0, num_scenes, bc.scene_chunk):
            idx = np.minimum(np.arange(lo, lo + bc.scene_chunk), num_scenes - 1)  # last chunk padded
            real = np.arange(lo, lo + bc.scene_chunk) < num_scenes
            keys = jax.vmap(jax.random.fold_in, (None, 0))(pass_key, jnp.asarray(idx))
            obs, track = jax.device_get(fn(env.take_scenario(bank, jnp.asarray(idx)), keys, params, noise))
            valid = np.asarray(track.valid) & real[:, None, None]
            parts.append((jax.tree.map(functools.partial(_select, mask=valid), obs), np.asarray(track.action)[valid]))
            if p == 0:
                errs.append(np.asarray(track.err)[real])
                tracked.append(np.asarray(track.tracked)[real])
                labels.append(np.asarray(track.action)[valid])
    obs = jax.tree.map(lambda *x: np.concatenate(x), *[o for o, _ in parts])
    action = np.concatenate([act for _, act in parts]).astype(np.int32)
    data = Dataset(obs=obs, action=action, weight=np.ones(action.shape, np.float32))
    stats = tracking_stats(np.concatenate(errs), np.concatenate(tracked), cfg.dt)
    clean = np.concatenate(labels)
    stats.update(scenes=int(num_scenes), samples=int(action.shape[0]), clean_samples=int(clean.shape[0]),
                 noisy_samples=int(action.shape[0] - clean.shape[0]),
                 keep_going_share=float(np.mean(clean == n_keep_going(params))) if clean.size else 0.0)
    return data, stats


def _select(x, mask: np.ndarray) -> np.ndarray:
    return np.asarray(x)[mask]


def n_keep_going(params: SimParams) -> int:
    """Index of the (accel 0, steer 0) action of the grid."""
    n_str = params.steer_grid.shape[0]
    return (params.accel_grid.shape[0] // 2) * n_str + n_str // 2


def tracking_stats(err: np.ndarray, tracked: np.ndarray, dt: float) -> dict:
    """Tracking error of the noise-free labels vs the log, over the tracked agents: err [S, A, N + 1]
    (metres), tracked [S, A]. Final = after the last step (N x dt seconds)."""
    e = err[tracked]  # [agents, N + 1]
    if e.size == 0:
        return dict(tracked_agents=0)
    return dict(
        tracked_agents=int(e.shape[0]),
        horizon_s=round(float((e.shape[1] - 1) * dt), 3),
        final_error_mean=float(e[:, -1].mean()),
        final_error_p95=float(np.percentile(e[:, -1], 95)),
        final_error_max=float(e[:, -1].max()),
        error_mean=float(e.mean()),
        error_max=float(e.max()),
    )


def pad(data: Dataset, multiple: int) -> Dataset:
    """data with weight-0 copies of its first sample appended so the length is a multiple of `multiple`."""
    m = data.action.shape[0]
    if m == 0:
        raise ValueError("no behaviour-cloning samples: no scene has an agent the policy would control")
    extra = (-m) % multiple
    if extra == 0:
        return data
    grow = lambda x: np.concatenate([np.asarray(x), np.repeat(np.asarray(x)[:1], extra, 0)])
    padded = jax.tree.map(grow, data)
    return padded.replace(weight=np.concatenate([np.asarray(data.weight), np.zeros(extra, np.float32)]))


def make_optimizer(bc: BCConfig, total_steps: int) -> optax.GradientTransformation:
    """Global-norm clipping + Adam with bc.lr_schedule over total_steps minibatch steps."""
    if bc.lr_schedule == "linear":
        lr = optax.linear_schedule(bc.lr, 0.0, max(total_steps, 1))
    elif bc.lr_schedule == "cosine":
        lr = optax.cosine_decay_schedule(bc.lr, max(total_steps, 1))
    else:
        lr = bc.lr
    return optax.chain(optax.clip_by_global_norm(bc.max_grad_norm), optax.adam(lr))


def loss_and_stats(net: networks.ActorCritic, params, obs: Obs, action: jax.Array, weight: jax.Array,
                   n_steer: int = 13):
    """Weighted cross-entropy of the labels [B] under the actor's logits, and accuracy statistics
    (exact action, acceleration row, steering column of the n_accel x n_steer grid). -> (loss [], stats)."""
    logits, _, _ = net.apply(params, obs)
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, action[:, None], -1)[:, 0]
    w = weight / jnp.maximum(weight.sum(), 1.0)
    pred = jnp.argmax(logits, -1)
    n_str = n_steer
    stats = dict(
        loss=jnp.sum(w * nll),
        accuracy=jnp.sum(w * (pred == action)),
        accel_accuracy=jnp.sum(w * (pred // n_str == action // n_str)),
        steer_accuracy=jnp.sum(w * (pred % n_str == action % n_str)),
    )
    return stats["loss"], stats


def make_epoch(net: networks.ActorCritic, bc: BCConfig, optimizer: optax.GradientTransformation):
    """Jitted `epoch(params, opt_state, data, key) -> (params, opt_state, stats)`: one pass over data
    [M, ...] (M a multiple of bc.batch_size, see `pad`) in a random order, minibatches scanned."""

    @jax.jit
    def epoch(params, opt_state, data: Dataset, key: jax.Array):
        m = data.action.shape[0] // bc.batch_size
        order = jax.random.permutation(key, m * bc.batch_size).reshape(m, bc.batch_size)

        def step(carry, idx):
            p, o = carry
            mb = jax.tree.map(lambda x: x[idx], data)
            (_, stats), grads = jax.value_and_grad(lambda q: loss_and_stats(net, q, mb.obs, mb.action, mb.weight),
                                                   has_aux=True)(p)
            updates, o = optimizer.update(grads, o, p)
            stats["grad_norm"] = optax.tree.norm(grads)
            return (optax.apply_updates(p, updates), o), stats

        (params, opt_state), stats = jax.lax.scan(step, (params, opt_state), order)
        return params, opt_state, jax.tree.map(jnp.mean, stats)

    return epoch


def make_evaluate(net: networks.ActorCritic, batch_size: int):
    """Jitted `evaluate(params, data) -> stats`: loss and accuracies over data [M, ...] (M a multiple
    of batch_size), weighted by sample."""

    @jax.jit
    def evaluate(params, data: Dataset):
        chunks = jax.tree.map(lambda x: x.reshape((-1, batch_size) + x.shape[1:]), data)

        def one(mb):
            _, stats = loss_and_stats(net, params, mb.obs, mb.action, mb.weight)
            total = mb.weight.sum()
            return {k: v * total for k, v in stats.items()}, total

        sums, totals = jax.lax.map(one, chunks)
        n = jnp.maximum(totals.sum(), 1.0)
        return {k: v.sum() / n for k, v in sums.items()}

    return evaluate
