"""Experiment ConfigDicts <-> the static dataclasses the algorithms take.

One source of defaults: an experiment file states only what differs from a dataclass's defaults
(`section(PPOConfig, lr=1e-3)`), and a job turns the section back into the dataclass
(`fields(PPOConfig, config.ppo, "ppo")`, or `build(...)` for the dataclass itself), refusing unknown keys
by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections


def defaults(cls) -> dict[str, Any]:
    """Every field of dataclass `cls` with its default value."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def section(cls, exclude: tuple[str, ...] = (), **diff) -> ml_collections.ConfigDict:
    """A config section holding `cls`'s defaults (so every field can be overridden from the command
    line), `diff` applied; unknown names raise. Fields in `exclude` and fields whose default is None
    (a ConfigDict cannot type them) are left out: the dataclass default applies."""
    values = {k: v for k, v in defaults(cls).items() if k not in exclude and v is not None}
    unknown = set(diff) - set(defaults(cls))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
    return ml_collections.ConfigDict({**values, **diff})


def fields(cls, section_, name: str) -> dict[str, Any]:
    """A config section as keyword arguments of dataclass `cls`; unknown keys raise, naming them."""
    values = section_.to_dict() if hasattr(section_, "to_dict") else dict(section_)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"config.{name}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def build(cls, section_, name: str, **extra):
    """cls(**fields(cls, section_, name), **extra); a ValueError it raises names the field as the command
    line spells it (`config.NAME.field` for `CLS.field`)."""
    values = fields(cls, section_, name)
    try:
        return cls(**values, **extra)
    except ValueError as e:
        raise ValueError(str(e).replace(f"{cls.__name__}.", f"config.{name}.")) from None


def positive(section_, names, prefix: str) -> None:
    """Raise ValueError naming `prefix.name` for any of `names` below 1."""
    for name in names:
        if section_[name] < 1:
            raise ValueError(f"config.{prefix}.{name} must be >= 1, got {section_[name]}")


def network(net_section, **force):
    """The NetConfig of a config's `net` section (a preset name plus NetConfig overrides); `force`
    fields win over both. Raises ValueError naming the bad field."""
    from cp_jax.policy import networks

    presets = networks.PRESETS
    if net_section.preset not in presets:
        raise ValueError(f"config.net.preset: unknown {net_section.preset!r}; known: {sorted(presets)}")
    overrides = fields(networks.NetConfig, net_section.overrides, "net.overrides")
    net = dataclasses.replace(presets[net_section.preset](), **{**overrides, **force})
    net.validate()
    return net
