"""Scenario banks: many scenes padded to one SimConfig and stacked on a leading axis."""

from __future__ import annotations

from cp_jax.scenarios.builder import build_scenario
from cp_jax.scenarios.procedural import generator, layouts
from cp_jax.scenarios.raw import RawScene
from cp_jax.sim import env
from cp_jax.sim.types import Scenario, SimConfig


def procedural_scenes(num_scenes: int, seed: int = 0, num_agents: int = 12, kinds=None) -> list[RawScene]:
    """num_scenes procedural scenes, cycling through kinds (default: all), seeds seed, seed+1, ..."""
    kinds = tuple(kinds or layouts.LAYOUT_KINDS)
    return [generator.generate(seed + i, kinds[i % len(kinds)], num_agents) for i in range(num_scenes)]


def make_bank(raws: list[RawScene], cfg: SimConfig) -> Scenario:
    """Build every scene with cfg and stack them: a Scenario with leading axis [N]."""
    return env.stack_scenarios([build_scenario(r, cfg) for r in raws])
