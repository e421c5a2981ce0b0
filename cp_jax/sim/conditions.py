"""Reward-condition vectors: sampling ranges, named styles, scaling for the observation.

A condition is [COND_DIM] = (goal_radius, alpha_coll, alpha_bnd, alpha_comfort, alpha_l_align,
alpha_vel_align, alpha_l_center, alpha_center_bias, alpha_reverse, goal_speed).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.sim.types import COND_FIELDS

# Training ranges (uniform), per field, in COND_FIELDS order.
COND_LOW = np.array([2.0, 0.0, 0.0, 0.0, 2.5e-4, 0.0, 2.5e-4, -0.5, 2.5e-4, 3.0], np.float32)
COND_HIGH = np.array([12.0, 3.0, 3.0, 0.1, 2.5e-2, 1.0, 7.5e-3, 0.5, 7.5e-3, 30.0], np.float32)

EVAL_GOAL_RADIUS = 2.0

_BASE_STYLES = {
    #              coll  bnd  comfort l_align vel_align l_center center_bias reverse goal_speed
    "aggressive": (0.2, 0.2, 0.0, 0.001, 0.1, 0.00025, 0.0, 0.0005, 30.0),
    "normal": (3.0, 3.0, 0.05, 0.015, 0.5, 0.0038, 0.0, 0.0038, 20.0),
    "cautious": (3.0, 3.0, 0.1, 0.025, 1.0, 0.0075, 0.5, 0.0075, 5.0),
}


def _style_vector(values) -> np.ndarray:
    return np.array((EVAL_GOAL_RADIUS, *values), np.float32)


STYLES: dict[str, np.ndarray] = {name: _style_vector(v) for name, v in _BASE_STYLES.items()}
STYLES["cautious_normal"] = 0.5 * (STYLES["cautious"] + STYLES["normal"])
STYLES["normal_aggressive"] = 0.5 * (STYLES["normal"] + STYLES["aggressive"])
STYLES["halfway"] = STYLES["normal_aggressive"]
# CounterPlay's retry styles, cautious -> aggressive.
RETRY_STYLES = ("cautious", "cautious_normal", "normal", "normal_aggressive", "aggressive")


def style(name: str) -> jax.Array:
    """The [COND_DIM] condition of a named style."""
    if name not in STYLES:
        raise ValueError(f"unknown style {name!r}; known: {sorted(STYLES)}")
    return jnp.asarray(STYLES[name])


def sample(key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
    """Conditions [*shape, COND_DIM] uniform over the training ranges."""
    u = jax.random.uniform(key, (*shape, len(COND_FIELDS)))
    return jnp.asarray(COND_LOW) + u * jnp.asarray(COND_HIGH - COND_LOW)


def scale(cond: jax.Array) -> jax.Array:
    """Map each field to [-1, 1] by its sampling range (styles may fall slightly outside)."""
    low, high = jnp.asarray(COND_LOW), jnp.asarray(COND_HIGH)
    return 2.0 * (cond - low) / (high - low) - 1.0


def field(cond: jax.Array, name: str) -> jax.Array:
    """One field [...] of conditions [..., COND_DIM]."""
    return cond[..., COND_FIELDS.index(name)]
