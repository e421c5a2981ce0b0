"""Policies: the late-fusion actor-critic (networks) and its categorical action distribution."""

from cp_jax.policy import distributions, networks
from cp_jax.policy.networks import (
    ActorCritic,
    NetConfig,
    init_params,
    initial_carry,
    large,
    medium,
    reset_carry,
    small,
    value_under,
    with_condition,
)

__all__ = [
    "ActorCritic", "NetConfig", "distributions", "init_params", "initial_carry", "large", "medium", "networks",
    "reset_carry", "small", "value_under", "with_condition",
]
