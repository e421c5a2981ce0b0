"""Categorical distribution over logits [..., n] (the 91 discrete actions)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sample(key: jax.Array, logits: jax.Array) -> jax.Array:
    """int32 [...] drawn from softmax(logits [..., n])."""
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def greedy(logits: jax.Array) -> jax.Array:
    """int32 [...] argmax of logits [..., n]."""
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    """[...] log-probability of int action [...] under logits [..., n]."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def entropy(logits: jax.Array) -> jax.Array:
    """[...] entropy in nats of logits [..., n] (actions with -inf logits contribute 0)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.where(jnp.isfinite(logp), jnp.exp(logp) * logp, 0.0), axis=-1)


def kl(p_logits: jax.Array, q_logits: jax.Array) -> jax.Array:
    """[...] KL(p || q) in nats between categoricals given by logits [..., n]."""
    logp, logq = jax.nn.log_softmax(p_logits, axis=-1), jax.nn.log_softmax(q_logits, axis=-1)
    return jnp.sum(jnp.where(jnp.isfinite(logp), jnp.exp(logp) * (logp - logq), 0.0), axis=-1)
