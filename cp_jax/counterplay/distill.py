"""Distillation: teach the student, under its deployment condition, what the teacher does under the
retry style on the same states; keep it close to the anchor on fresh self-play states.

    buf = Buffer(obs, action, teacher_cond, student_cond, weight)      # [N, ...] samples
    mb = draw(buf, key, cfg.distill_batch)
    reg_obs, reg_mask = sample_rows(rec.states, rec.scenes, key, cfg.reg_states, sim)
    (total, stats), grads = jax.value_and_grad(make_loss(net, cfg), has_aux=True)(
        params, teacher_params, anchor_params, mb, reg_obs, reg_mask)     # loop.py runs the steps

Loss (per gradient step):
    distill  = mean_w KL(pi_teacher(. | o, c_retry) || pi(. | o, c_deploy))
    + anchor_kl  * mean KL(pi_anchor(. | o', c') || pi(. | o', c'))  on fresh self-play rows o' under
                   their recorded conditions c'
    + value_coef * mean (V(o', c') - V_anchor(o', c'))^2              (the critic kept to the anchor's)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import distributions as dist
from cp_jax.policy import networks
from cp_jax.sim import conditions, env, types
from cp_jax.sim.types import Obs, Scenario, SimConfig, SimState


@struct.dataclass
class Buffer:
    """Distillation samples [N, ...]: one row of one observation each."""

    obs: Obs
    action: jax.Array  # [N] int32 executed action
    teacher_cond: jax.Array  # [N, COND_DIM] raw condition the teacher sees
    student_cond: jax.Array  # [N, COND_DIM] raw condition the student sees (the deployment condition)
    weight: jax.Array  # [N] float: 1 for real samples, 0 for padding


def make_optimizer(cfg: CounterPlayConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr, eps=1e-5))


def sample_rows(states: SimState, scenes: Scenario, key: jax.Array, num: int,
                sim: SimConfig) -> tuple[Obs, jax.Array]:
    """Observations of every agent in num random recorded states: states [B, T, ...], scenes [B, ...].
    Returns (Obs [num * A, ...], mask [num * A] bool: a POLICY agent alive in that state)."""
    b, t = states.t.shape
    k_b, k_t = jax.random.split(key)
    bi, ti = jax.random.randint(k_b, (num,), 0, b), jax.random.randint(k_t, (num,), 0, t)
    s = jax.tree.map(lambda x: x[bi, ti], states)
    sc = jax.tree.map(lambda x: x[bi], scenes)
    obs = jax.vmap(lambda st, c: env.observe(st, c, sim))(s, sc)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    return jax.tree.map(flat, obs), (s.alive & (s.controller == types.POLICY)).reshape(-1)


def draw(buf: Buffer, key: jax.Array, num: int) -> Buffer:
    """num samples drawn with replacement among the weighted ones (all-zero weights: weight 0 rows)."""
    has = buf.weight > 0
    logits = jnp.where(jnp.any(has), jnp.where(has, 0.0, -jnp.inf), 0.0)
    idx = jax.random.categorical(key, logits, shape=(num,))
    return jax.tree.map(lambda x: x[idx], buf)


def _wmean(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.sum(x * w) / jnp.maximum(w.sum(), 1.0)


def make_loss(net: networks.ActorCritic, cfg: CounterPlayConfig):
    """loss(params, teacher_params, anchor_params, mb: Buffer, reg_obs, reg_mask) -> (total, stats)."""
    deploy = conditions.style(cfg.deploy_style)

    def loss(p, teacher_p, anchor_p, mb: Buffer, reg_obs: Obs, reg_mask: jax.Array):
        w = mb.weight
        s_logits = net.apply(p, networks.with_condition(mb.obs, mb.student_cond))[0]
        t_logits = jax.lax.stop_gradient(net.apply(teacher_p, networks.with_condition(mb.obs, mb.teacher_cond))[0])
        distill = _wmean(dist.kl(t_logits, s_logits), w)
        r_logits, r_value, _ = net.apply(p, reg_obs)
        a_logits, a_value, _ = jax.lax.stop_gradient(net.apply(anchor_p, reg_obs))
        m = reg_mask.astype(jnp.float32)
        reg_kl = _wmean(dist.kl(a_logits, r_logits), m)
        d_obs = networks.with_condition(reg_obs, deploy)  # the same rows under the deployment condition
        deploy_kl = _wmean(dist.kl(jax.lax.stop_gradient(net.apply(anchor_p, d_obs)[0]), net.apply(p, d_obs)[0]), m)
        value = _wmean((r_value - a_value) ** 2, m)
        total = distill + cfg.anchor_kl * reg_kl + cfg.value_coef * value
        agree = _wmean((jnp.argmax(s_logits, -1) == jnp.argmax(t_logits, -1)).astype(jnp.float32), w)
        stats = dict(distill_loss=distill, anchor_kl=reg_kl, deploy_kl=deploy_kl, value_loss=value,
                     teacher_agreement=agree)
        return total, stats

    return loss
