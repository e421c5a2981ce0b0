"""Late-fusion actor-critic over the BehaviorBench observation (cp_jax.sim.observation).

Ego [..., 7] -> MLP; partners [..., K, 8] and road [..., k, 7] -> per-element Linear -> LayerNorm -> Linear,
masked max-pool over the set (an all-masked set pools to zeros); condition [..., 10] -> Linear. The four
[..., set_width] codes are concatenated -> GELU -> trunk (Dense + GELU) -> optional LSTM -> actor logits
[..., num_actions] and critic value [...]. Any leading batch dims; everything float32.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.sim import conditions
from cp_jax.sim.types import COND_DIM, EGO_DIM, OBJECT_TYPES, PARTNER_DIM, ROAD_DIM, ROAD_TYPES, Obs, SimConfig

Carry = Any  # None (feed-forward) or a tuple, one (c, h) [..., lstm] pair per tower


@dataclasses.dataclass(frozen=True)
class NetConfig:
    """Static network sizes. Hashable: one compiled program per config."""

    set_width: int = 32  # per-set encoder width (ego, partners, road, condition)
    trunk: tuple[int, ...] = (256,)  # shared backbone widths (GELU)
    separate_towers: bool = False  # True: actor and critic each get their own trunk (and LSTM)
    lstm: int = 0  # 0 = feed-forward; > 0 = an LSTM of this size after the trunk
    num_actions: int = 91
    condition: bool = True  # False: obs.cond is ignored (non-conditioned policy)
    chunk: int = 0  # > 0: set encoders run over this many agent rows at a time (CPU cache); 0 = all at once
    # Rescale the observation before the encoders (OBS_GAINS): positions to units of 10 m, speeds to
    # 10 m/s. False (policies saved before the field existed): the observation as it comes.
    obs_gain: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name, low in (("set_width", 1), ("lstm", 0), ("num_actions", 2), ("chunk", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"NetConfig.{name} must be an int >= {low}, got {value!r}")
        if not isinstance(self.trunk, tuple) or not self.trunk:
            raise ValueError(f"NetConfig.trunk must be a non-empty tuple of widths, got {self.trunk!r}")
        for width in self.trunk:
            if not isinstance(width, int) or isinstance(width, bool) or width < 1:
                raise ValueError(f"NetConfig.trunk widths must be positive ints, got {self.trunk!r}")
        for name in ("separate_towers", "condition", "obs_gain"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"NetConfig.{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def towers(self) -> int:
        return 2 if self.separate_towers else 1


def small() -> NetConfig:
    """CPU default: feed-forward, width-32 encoders, one 256 layer (~61K params), sets in chunks of 128 rows."""
    return NetConfig(set_width=32, trunk=(256,), chunk=128, obs_gain=True)


def medium() -> NetConfig:
    """Small's encoders with a 2 x 512 GELU trunk (~0.38M params): ~1.2x small's PPO cost on CPU."""
    return NetConfig(set_width=32, trunk=(512, 512), chunk=128, obs_gain=True)


def large() -> NetConfig:
    """Accelerator config (Gigaflow-like): width-128 encoders, 3 x 1024 GELU, separate towers (~5.4M params)."""
    return NetConfig(set_width=128, trunk=(1024, 1024, 1024), separate_towers=True, obs_gain=True)


PRESETS = {"small": small, "medium": medium, "large": large}  # config.net.preset -> NetConfig factory


# Per-feature gains (NetConfig.obs_gain), in the observation's column order (cp_jax.sim.observation).
# Its BehaviorBench normalisation puts a 1 m offset at 0.02 (road, partners) or 0.005 (goal), fifty
# times below the type one-hots and heading cosines beside it in the first layer; these bring
# positions and lengths to units of 10 m and speeds to 10 m/s. Type columns keep gain 1.
OBS_GAINS = dict(
    ego=(20.0, 20.0, 10.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),  # goal x, y; speed; width, length, flags, accel, steer
    partners=(5.0, 5.0, 1.0, 1.0, 1.0, 1.0, 10.0, 1.0),  # x, y; width, length; cos, sin; speed; type
    road=(5.0, 5.0, 10.0, 1.0, 1.0, 1.0, 1.0),  # midpoint x, y; length; width const; cos, sin; type
)


def _dense(width: int, scale: float = np.sqrt(2.0), name: str | None = None) -> nn.Dense:
    """purejaxrl init: orthogonal(scale) kernel, zero bias."""
    return nn.Dense(width, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros, name=name)


class _Encoder(nn.Module):
    """Linear -> LayerNorm -> Linear over the last axis, written as plain jnp so it can run in chunks.

    Without a mask: x [..., d] -> [..., width]. With a mask (a set encoder): the last column of x is a type
    id, one-hot over num_types; x [..., n, d], mask [..., n] -> masked max-pool [..., width], zeros where
    the whole set is masked. chunk > 0 runs the set in lax.map chunks of that many rows (rematerialised),
    so the [rows, n, width] intermediates stay in cache on a CPU.
    """

    width: int
    num_types: int = 0
    chunk: int = 0

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        d_in = x.shape[-1] - 1 + self.num_types if self.num_types else x.shape[-1]
        ortho, zeros, ones = nn.initializers.orthogonal(np.sqrt(2.0)), nn.initializers.zeros, nn.initializers.ones
        p = dict(
            w1=self.param("w1", ortho, (d_in, self.width)),
            b1=self.param("b1", zeros, (self.width,)),
            ln_scale=self.param("ln_scale", ones, (self.width,)),
            ln_bias=self.param("ln_bias", zeros, (self.width,)),
            w2=self.param("w2", ortho, (self.width, self.width)),
            b2=self.param("b2", zeros, (self.width,)),
        )
        if mask is None:
            return _mlp(p, x)
        pool = lambda xm: _pool(_mlp(p, _with_type(jnp.where(xm[1][..., None], xm[0], 0.0), self.num_types)), xm[1])
        lead, (n, d) = x.shape[:-2], x.shape[-2:]
        rows = int(np.prod(lead))
        if not self.chunk or rows <= self.chunk:
            return pool((x, mask))
        flat = (x.reshape(rows, n, d), mask.reshape(rows, n))
        return jax.lax.map(jax.checkpoint(pool), flat, batch_size=self.chunk).reshape(*lead, self.width)


def _mlp(p: dict, x: jax.Array) -> jax.Array:
    """The encoder's math: [..., d] -> [..., width]."""
    h = x @ p["w1"] + p["b1"]
    mean = jnp.mean(h, -1, keepdims=True)
    var = jnp.mean(jnp.square(h - mean), -1, keepdims=True)
    h = (h - mean) * jax.lax.rsqrt(var + 1e-6) * p["ln_scale"] + p["ln_bias"]
    return h @ p["w2"] + p["b2"]


def _with_type(x: jax.Array, num_types: int) -> jax.Array:
    """Replace the last column (an int id stored as float) by its one-hot: [..., d] -> [..., d - 1 + num_types]."""
    kind = jnp.round(x[..., -1]).astype(jnp.int32)
    return jnp.concatenate([x[..., :-1], jax.nn.one_hot(kind, num_types, dtype=x.dtype)], -1)


def _pool(h: jax.Array, mask: jax.Array) -> jax.Array:
    """Masked max over the set axis: h [..., n, w], mask [..., n] -> [..., w]; zeros where all masked."""
    pooled = jnp.max(jnp.where(mask[..., None], h, jnp.finfo(h.dtype).min), axis=-2)
    return jnp.where(jnp.any(mask, -1)[..., None], pooled, 0.0)


class _Tower(nn.Module):
    """Trunk (Dense + GELU per width) and optional LSTM: [..., d] -> [..., trunk[-1] or lstm]."""

    trunk: tuple[int, ...]
    lstm: int

    @nn.compact
    def __call__(self, x: jax.Array, carry):
        for width in self.trunk:
            x = nn.gelu(_dense(width)(x))
        if self.lstm:
            carry, x = nn.OptimizedLSTMCell(self.lstm)(carry, x)
        return x, carry


class ActorCritic(nn.Module):
    """Late-fusion actor-critic (module docstring). Shared encoders; one or two towers."""

    cfg: NetConfig

    @nn.compact
    def __call__(self, obs: Obs, carry: Carry = None) -> tuple[jax.Array, jax.Array, Carry]:
        """obs with leading dims [...] -> (logits [..., num_actions], value [...], new_carry).

        carry: None for feed-forward; for an LSTM the pytree from `initial_carry(cfg, [...])`."""
        cfg = self.cfg
        gain = lambda name: jnp.asarray(OBS_GAINS[name], jnp.float32) if cfg.obs_gain else 1.0
        f32 = lambda x, name: jnp.asarray(x, jnp.float32) * gain(name)
        codes = [
            _Encoder(cfg.set_width, name="ego")(f32(obs.ego, "ego")),
            _Encoder(cfg.set_width, len(OBJECT_TYPES), cfg.chunk, name="partners")(
                f32(obs.partners, "partners"), obs.partner_mask),
            _Encoder(cfg.set_width, len(ROAD_TYPES), cfg.chunk, name="road")(f32(obs.road, "road"), obs.road_mask),
        ]
        if cfg.condition:
            codes.append(_dense(cfg.set_width, name="condition")(jnp.asarray(obs.cond, jnp.float32)))
        x = nn.gelu(jnp.concatenate(codes, -1))
        if cfg.lstm and carry is None:
            raise ValueError("NetConfig.lstm > 0: pass carry=initial_carry(cfg, batch_shape)")
        carry = carry if cfg.lstm else (None,) * cfg.towers
        outs = [_Tower(cfg.trunk, cfg.lstm, name=f"tower{i}")(x, carry[i]) for i in range(cfg.towers)]
        logits = _dense(cfg.num_actions, 0.01, name="actor")(outs[0][0])
        value = _dense(1, 1.0, name="critic")(outs[-1][0])[..., 0]
        return logits, value, (tuple(c for _, c in outs) if cfg.lstm else None)


def initial_carry(cfg: NetConfig, batch_shape: tuple[int, ...]) -> Carry:
    """None for feed-forward; else zeros: a tuple over towers of (c, h), each [*batch_shape, lstm]."""
    if not cfg.lstm:
        return None
    zeros = jnp.zeros((*batch_shape, cfg.lstm), jnp.float32)
    return tuple((zeros, zeros) for _ in range(cfg.towers))


def reset_carry(carry: Carry, done: jax.Array) -> Carry:
    """Zero the carry where done [...] (the carry's leading dims); None passes through."""
    return jax.tree.map(lambda x: jnp.where(done[..., None], 0.0, x), carry)


def dummy_obs(sim_cfg: SimConfig, batch_shape: tuple[int, ...] = (1,)) -> Obs:
    """An all-zero, all-masked Obs [*batch_shape, ...] with sim_cfg's set sizes."""
    b, k, r = tuple(batch_shape), sim_cfg.obs_partners, sim_cfg.obs_road
    return Obs(
        ego=jnp.zeros((*b, EGO_DIM), jnp.float32),
        cond=jnp.zeros((*b, COND_DIM), jnp.float32),
        partners=jnp.zeros((*b, k, PARTNER_DIM), jnp.float32),
        partner_mask=jnp.zeros((*b, k), bool),
        road=jnp.zeros((*b, r, ROAD_DIM), jnp.float32),
        road_mask=jnp.zeros((*b, r), bool),
    )


def init_params(cfg: NetConfig, sim_cfg: SimConfig, key: jax.Array):
    """Variables {'params': ...} for `ActorCritic(cfg).apply(params, obs, carry)`."""
    return ActorCritic(cfg).init(key, dummy_obs(sim_cfg), initial_carry(cfg, (1,)))


def num_params(params) -> int:
    """Total number of scalars in a parameter pytree."""
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


def live(obs: Obs) -> jax.Array:
    """[...] bool: the row belongs to an agent in the world (dead rows of observe() are all zero)."""
    return jnp.any(obs.ego != 0, -1) | jnp.any(obs.partner_mask, -1) | jnp.any(obs.road_mask, -1)


def with_condition(obs: Obs, cond: jax.Array) -> Obs:
    """obs [...] with cond replaced by conditions.scale(cond) on live rows; cond raw [..., 10] or [10]."""
    scaled = jnp.broadcast_to(conditions.scale(jnp.asarray(cond, jnp.float32)), obs.cond.shape)
    return obs.replace(cond=jnp.where(live(obs)[..., None], scaled, 0.0))


def value_under(net: ActorCritic, params, obs: Obs, cond: jax.Array, carry: Carry = None) -> jax.Array:
    """Critic value [...] of obs [...] under the raw condition cond [..., 10] (or [10])."""
    return net.apply(params, with_condition(obs, cond), carry)[1]
