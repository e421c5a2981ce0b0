"""A trained policy on disk: a folder with params.msgpack (flax serialization, no pickle),
net_config.json and sim_config.json (the observation sizes it was trained with).

    save(folder, net_cfg, params, sim_cfg)
    policy = load("assets/anchors/conditioned_small")   # -> SavedPolicy(net, params, sim)
    digest(folder)         # its files; behaviour(policy): what the network code computes from them
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import serialization

from cp_jax.policy import networks
from cp_jax.sim.types import SimConfig

FILES = ("params.msgpack", "net_config.json", "sim_config.json")


class SavedPolicy(NamedTuple):
    net: networks.ActorCritic
    params: Any
    sim: SimConfig  # the config it was trained with (observation sizes matter)


def save(folder: str, net_cfg: networks.NetConfig, params, sim_cfg: SimConfig) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "params.msgpack"), "wb") as f:
        f.write(serialization.to_bytes(jax.device_get(params)))
    with open(os.path.join(folder, "net_config.json"), "w") as f:
        json.dump(dataclasses.asdict(net_cfg), f, indent=2)
    with open(os.path.join(folder, "sim_config.json"), "w") as f:
        json.dump(dataclasses.asdict(sim_cfg), f, indent=2)


def digest(folder: str) -> str:
    """A short hash of the policy's files (parameters, network and simulator configs): what runs when it
    is loaded, so two folders with one digest drive alike."""
    import hashlib

    h = hashlib.sha1()
    for name in FILES:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: missing (a saved policy folder holds {', '.join(FILES)})")
        with open(path, "rb") as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()[:12]


def behaviour(policy: SavedPolicy, rows: int = 2) -> np.ndarray:
    """[rows, num_actions + 1]: the policy's logits and value on a fixed pseudo-random observation, with
    float32 matmuls on any backend. `digest` pins the files; this pins what the network code makes of them
    (a changed layer or activation shows here, a refactor that computes the same does not)."""
    rng = np.random.default_rng(0)
    obs = jax.tree.map(lambda x: rng.random(x.shape) < 0.5 if x.dtype == bool
                       else rng.standard_normal(x.shape).astype(np.float32), networks.dummy_obs(policy.sim, (rows,)))
    with jax.default_matmul_precision("float32"):
        logits, value, _ = policy.net.apply(policy.params, obs, networks.initial_carry(policy.net.cfg, (rows,)))
    return np.concatenate([np.asarray(logits), np.asarray(value)[:, None]], -1)


def _read_json(folder: str, name: str) -> dict:
    path = os.path.join(folder, name)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing (a saved policy folder holds {', '.join(FILES)})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def load(folder: str) -> SavedPolicy:
    """Read a saved policy; errors name the file and the field (parameters that are not all finite are
    refused too)."""
    raw = _read_json(folder, "net_config.json")
    try:
        net_cfg = networks.NetConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    except (TypeError, ValueError) as e:
        raise ValueError(f"{os.path.join(folder, 'net_config.json')}: {e}") from None
    try:
        sim_cfg = SimConfig(**_read_json(folder, "sim_config.json"))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{os.path.join(folder, 'sim_config.json')}: {e}") from None
    # Shapes only (traced, not run): the parameters themselves come from the file.
    template = jax.eval_shape(lambda: networks.init_params(net_cfg, sim_cfg, jax.random.PRNGKey(0)))
    path = os.path.join(folder, "params.msgpack")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: missing (a saved policy folder holds {', '.join(FILES)})")
    with open(path, "rb") as f:
        data = f.read()
    # Decoded first, on its own: a file that does not decode is damaged (truncated, overwritten), which
    # no net_config.json could fix; one that decodes but does not fit the template is a mismatch.
    try:
        state = serialization.msgpack_restore(data)
    except Exception as e:  # msgpack's and flax's array decoding raise several types
        raise ValueError(f"{path}: damaged, not a complete flax msgpack file ({len(data)} bytes; {e}); "
                         "save or export the policy again") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: damaged, holds a {type(state).__name__} instead of a parameter tree "
                         f"({len(data)} bytes); save or export the policy again")
    try:
        params = serialization.from_state_dict(template, state)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: does not match {os.path.join(folder, 'net_config.json')} ({e})") from None
    bad = [p for p, a, b in zip(jax.tree.leaves_with_path(params), jax.tree.leaves(params), jax.tree.leaves(template),
                                strict=True) if a.shape != b.shape]
    if bad:
        raise ValueError(f"{path}: parameter {jax.tree_util.keystr(bad[0][0])} has the wrong shape for net_config.json")
    nonfinite = [(p, np.asarray(a)) for p, a in jax.tree.leaves_with_path(params) if not np.isfinite(a).all()]
    if nonfinite:  # a diverged training's parameters: every action it takes is meaningless
        p, a = nonfinite[0]
        raise ValueError(f"{path}: non-finite parameters ({len(nonfinite)} of {len(jax.tree.leaves(params))} arrays "
                         f"hold NaN or Inf, e.g. {jax.tree_util.keystr(p)}: {int((~np.isfinite(a)).sum())} of "
                         f"{a.size} values); the policy is unusable: train or export it again")
    return SavedPolicy(networks.ActorCritic(net_cfg), params, sim_cfg)
