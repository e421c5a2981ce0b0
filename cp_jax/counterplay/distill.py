"""Distillation: teach the student, under its deployment condition, what the teacher does under the
retry style on the same states; keep it close to the anchor on fresh self-play states.

    buf = Buffer(obs, action, teacher_cond, student_cond, weight)      # [N, ...] samples
    mb = draw(buf, key, cfg.distill_batch)
    reg_obs, reg_mask = sample_rows(rec.states, rec.scenes, key, cfg.reg_states, sim)
    (total, stats), grads = jax.value_and_grad(make_loss(net, cfg), has_aux=True)(
        params, teacher_params, anchor_params, mb, reg_obs, reg_mask)     # loop.py runs the steps

Loss (per gradient step):
    distill  = mean_w KL(pi_teacher(. | o, c_retry) || pi(. | o, c_deploy))   (target "kl")
             | mean_w -log pi(a_executed | o, c_deploy)                         (target "ce")
    + anchor_kl  * mean KL(pi_anchor(. | o', c') || pi(. | o', c'))  on fresh self-play rows o'
                   c' = the rows' recorded conditions (reg_condition "recorded"), the deployment
                   condition ("deploy": the student's own behaviour away from the taught states),
                   or the mean of the two ("both")
    + value_coef * mean (V(o', c') - V_anchor(o', c'))^2             (critic "keep")
    + value_coef * mean_w (V(o, c_deploy) - V_teacher(o, c_retry))^2  (critic "distill" only)
    + ppo_coef   * PPO's clipped surrogate on recorded rows (their own conditions, executed actions,
                   GAE advantages; sample_ppo)                          (ppo_coef > 0 only)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.rl import ppo
from cp_jax.sim import conditions, env, types
from cp_jax.sim.types import Obs, Scenario, SimConfig, SimState


@struct.dataclass
class Buffer:
    """Distillation samples [N, ...]: one row of one observation each."""

    obs: Obs
    action: jax.Array  # [N] int32 executed action (target "ce")
    teacher_cond: jax.Array  # [N, COND_DIM] raw condition the teacher sees
    student_cond: jax.Array  # [N, COND_DIM] raw condition the student sees (the deployment condition)
    weight: jax.Array  # [N] float: 1 for real samples, 0 for padding


def make_optimizer(cfg: CounterPlayConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr, eps=1e-5))


@struct.dataclass
class PPOBatch:
    """Recorded self-play rows for the optional PPO term [N, ...]."""

    obs: Obs  # under each row's recorded condition
    action: jax.Array  # [N] int32 executed action
    logp: jax.Array  # [N] its log-probability under the recording policy
    advantage: jax.Array  # [N] GAE advantage (record.py)
    mask: jax.Array  # [N] bool: a POLICY agent alive in that state


def _rows(states: SimState, scenes: Scenario, key: jax.Array, num: int, sim: SimConfig):
    """num random recorded states [num, ...] (states [B, T', ...], scenes [B, ...]), their env indices
    [num], every agent's observation [num, A, ...] and mask [num, A] (a POLICY agent alive there)."""
    b, t = states.t.shape
    k_b, k_t = jax.random.split(key)
    bi, ti = jax.random.randint(k_b, (num,), 0, b), jax.random.randint(k_t, (num,), 0, t)
    s = jax.tree.map(lambda x: x[bi, ti], states)
    sc = jax.tree.map(lambda x: x[bi], scenes)
    obs = jax.vmap(lambda st, c: env.observe(st, c, sim))(s, sc)
    return s, bi, obs, s.alive & (s.controller == types.POLICY)


def _flat(x: jax.Array) -> jax.Array:
    return x.reshape((-1,) + x.shape[2:])


def sample_rows(states: SimState, scenes: Scenario, key: jax.Array, num: int,
                sim: SimConfig) -> tuple[Obs, jax.Array]:
    """Observations of every agent in num random recorded states: states [B, T, ...], scenes [B, ...].
    Returns (Obs [num * A, ...], mask [num * A] bool: a POLICY agent alive in that state)."""
    _, _, obs, mask = _rows(states, scenes, key, num, sim)
    return jax.tree.map(_flat, obs), mask.reshape(-1)


def sample_ppo(rec, key: jax.Array, num: int, sim: SimConfig) -> PPOBatch:
    """Every agent's row in num random recorded states of rec (a record.Recording kept with PPO
    samples) -> PPOBatch [num * A]. Snapshot-thinned records draw among their snapshots' steps."""
    s, bi, obs, mask = _rows(rec.states, rec.scenes, key, num, sim)
    at = lambda x: x[bi, s.t]  # noqa: E731 - [num, A]: the snapshot's own step
    return PPOBatch(obs=jax.tree.map(_flat, obs), action=_flat(at(rec.action)), logp=_flat(at(rec.logp)),
                    advantage=_flat(at(rec.advantage)), mask=mask.reshape(-1))


def draw(buf: Buffer, key: jax.Array, num: int) -> Buffer:
    """num samples drawn with replacement among the weighted ones (all-zero weights: weight 0 rows)."""
    has = buf.weight > 0
    logits = jnp.where(jnp.any(has), jnp.where(has, 0.0, -jnp.inf), 0.0)
    idx = jax.random.categorical(key, logits, shape=(num,))
    return jax.tree.map(lambda x: x[idx], buf)


def _wmean(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.sum(x * w) / jnp.maximum(w.sum(), 1.0)


def make_loss(net: networks.ActorCritic, cfg: CounterPlayConfig):
    """loss(params, teacher_params, anchor_params, mb: Buffer, reg_obs, reg_mask, ppo_mb=None) -> (total, stats);
    ppo_mb: a PPOBatch for the optional PPO term (cfg.ppo_coef)."""
    deploy = conditions.style(cfg.deploy_style)

    def loss(p, teacher_p, anchor_p, mb: Buffer, reg_obs: Obs, reg_mask: jax.Array, ppo_mb: PPOBatch | None = None):
        w = mb.weight
        s_logits, s_value, _ = net.apply(p, networks.with_condition(mb.obs, mb.student_cond))
        t_logits, t_value, _ = jax.lax.stop_gradient(
            net.apply(teacher_p, networks.with_condition(mb.obs, mb.teacher_cond)))
        if cfg.target == "kl":
            distill = _wmean(dist.kl(t_logits, s_logits), w)
        else:
            distill = _wmean(-dist.log_prob(s_logits, mb.action), w)
        r_logits, r_value, _ = net.apply(p, reg_obs)
        a_logits, a_value, _ = jax.lax.stop_gradient(net.apply(anchor_p, reg_obs))
        m = reg_mask.astype(jnp.float32)
        reg_kl = _wmean(dist.kl(a_logits, r_logits), m)
        d_obs = networks.with_condition(reg_obs, deploy)  # the same rows under the deployment condition
        deploy_kl = _wmean(dist.kl(jax.lax.stop_gradient(net.apply(anchor_p, d_obs)[0]), net.apply(p, d_obs)[0]), m)
        anchor_reg = {"recorded": reg_kl, "deploy": deploy_kl, "both": 0.5 * (reg_kl + deploy_kl)}[cfg.reg_condition]
        value = _wmean((r_value - a_value) ** 2, m)
        if cfg.critic == "distill":
            value = value + _wmean((s_value - t_value) ** 2, w)
        total = distill + cfg.anchor_kl * anchor_reg + cfg.value_coef * value
        agree = _wmean((jnp.argmax(s_logits, -1) == jnp.argmax(t_logits, -1)).astype(jnp.float32), w)
        stats = dict(distill_loss=distill, anchor_kl=reg_kl, deploy_kl=deploy_kl, value_loss=value,
                     teacher_agreement=agree)
        if ppo_mb is not None:
            pw = ppo_mb.mask.astype(jnp.float32)
            logp = dist.log_prob(net.apply(p, ppo_mb.obs)[0], ppo_mb.action)
            surrogate, _, clip_frac = ppo.clipped_surrogate(logp, ppo_mb.logp, ppo_mb.advantage,
                                                            pw / jnp.maximum(pw.sum(), 1.0), cfg.ppo_clip)
            total = total + cfg.ppo_coef * surrogate
            stats.update(ppo_loss=surrogate, ppo_clip_frac=clip_frac)
        return total, stats

    return loss
