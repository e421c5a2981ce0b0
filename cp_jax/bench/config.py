"""BenchConfig: what one benchmark run covers (splits, regimes, ego styles, seeds, scenes, traffic).

Built once and used by every benchmark entry point (launch.evaluate from flags; the main job and
the sweep from their `bench` sections, experiments/main.py):

    bench = BenchConfig(regimes=("all",), seeds=3)      # validated on construction
    traffic = bench.traffic()                            # the traffic policies its regimes need
"""

from __future__ import annotations

import dataclasses
import os

from cp_jax.bench import episodes, suite
from cp_jax.sim import conditions


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Static benchmark settings (hashable); errors name the field."""

    splits: tuple[str, ...] = suite.SPLITS
    regimes: tuple[str, ...] = ("all",)  # names, or ("all",) for every regime in table order
    ego_styles: tuple[str, ...] = ("normal",)
    seeds: int = 1  # seeds 0 .. seeds - 1: they vary the sampled actions of policy traffic
    # a procedural set of suite.PROCEDURAL_SETS ("procedural": validation, "procedural_test": test, read only
    # by launch.results), procedural_scenes scenes with both splits of `pairs` pairs each; or a converted
    # scene cache (launch.build_scenes) with split manifests in `manifests` (default CACHE/splits)
    scenes: str = "procedural"
    manifests: str = ""
    pairs: int = 200
    procedural_scenes: int = 60
    agents: int = 12  # agents placed per procedural scene
    cache_dir: str = "~/.cache/cp_jax/scenes"  # procedural scenes are cached here
    figures: int = 0  # Fig.-3-style PNGs to write
    anchor_policy: str = "assets/anchors/conditioned_small"  # the conditioned anchor (style regimes)
    ppo_policy: str = "assets/anchors/ppo_small"  # the non-conditioned PPO policy (ppo regime)
    bc_policy: str = "assets/anchors/smart_bc"  # the behaviour-cloned policy (smart_bc regime)

    def __post_init__(self):
        for name in ("splits", "regimes", "ego_styles"):  # lists from a ConfigDict or flags
            object.__setattr__(self, name, tuple(getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        for s in self.splits:
            if s not in suite.SPLITS:
                raise ValueError(f"BenchConfig.splits: unknown split {s!r}; known: {', '.join(suite.SPLITS)}")
        if not self.splits:
            raise ValueError("BenchConfig.splits: name at least one split")
        if not self.regimes:
            raise ValueError("BenchConfig.regimes: name at least one regime (or all)")
        if not self.ego_styles:
            raise ValueError("BenchConfig.ego_styles: name at least one style; known: "
                             f"{', '.join(sorted(conditions.STYLES))}")
        try:
            episodes.regime_names(self.regimes)
        except ValueError as e:
            raise ValueError(f"BenchConfig.regimes: {e} (or all)") from None
        for s in self.ego_styles:
            if s not in conditions.STYLES:
                raise ValueError(f"BenchConfig.ego_styles: unknown style {s!r}; known: "
                                 f"{', '.join(sorted(conditions.STYLES))}")
        for name in ("seeds", "pairs", "procedural_scenes", "agents"):
            if getattr(self, name) < 1:
                raise ValueError(f"BenchConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.figures < 0:
            raise ValueError(f"BenchConfig.figures must be >= 0, got {self.figures}")
        if self.scenes not in suite.PROCEDURAL_SETS:
            if not os.path.isdir(self.scenes):
                raise ValueError(f"BenchConfig.scenes: {self.scenes!r} is neither a procedural set "
                                 f"({', '.join(suite.PROCEDURAL_SETS)}) nor a directory")
            if not os.path.exists(os.path.join(self.scenes, "sim_config.json")):
                raise ValueError(f"BenchConfig.scenes: {self.scenes!r} is not a scene cache (no sim_config.json; "
                                 "convert scene files with launch.build_scenes)")
            try:
                suite.read_manifests(self.manifest_dir, self.splits)
            except (ValueError, OSError) as e:
                raise ValueError(f"BenchConfig.manifests: {e}") from None
        for key in self.needed_traffic():
            path = getattr(self, f"{'bc' if key == 'smart_bc' else key}_policy")
            if not os.path.isdir(path):
                needed_by = [r for r in self.regime_list if episodes.REGIMES[r].policy == key]
                raise ValueError(f"BenchConfig.{'bc' if key == 'smart_bc' else key}_policy: {path!r} is not a "
                                 f"policy folder (needed by regimes {needed_by})")

    @property
    def regime_list(self) -> list[str]:
        return episodes.regime_names(self.regimes)

    @property
    def manifest_dir(self) -> str:
        """The split manifests' folder of a cache's scenes: `manifests`, else CACHE/splits."""
        return self.manifests or os.path.join(self.scenes, "splits")

    def needed_traffic(self) -> list[str]:
        """The traffic policies ("anchor", "ppo", "smart_bc") the regimes need."""
        return [k for k in episodes.TRAFFIC_POLICIES if any(episodes.REGIMES[r].policy == k for r in self.regime_list)]

    def traffic(self) -> dict[str, episodes.Driver]:
        """The traffic policies the regimes need, loaded."""
        from cp_jax.policy import saved

        out = {}
        for k in self.needed_traffic():
            field = f"{'bc' if k == 'smart_bc' else k}_policy"
            try:
                out[k] = episodes.from_saved(k, saved.load(getattr(self, field)))
            except (ValueError, OSError) as e:
                raise ValueError(f"BenchConfig.{field}: {e}") from None
        return out

    def suite(self, egos) -> suite.Suite:
        """The scenes and split pairs (procedural scenes are built with the first learned policy's
        SimConfig among egos, else a 16-agent default)."""
        if self.scenes not in suite.PROCEDURAL_SETS:
            return suite.cached_suite(self.scenes, self.manifest_dir, self.splits)
        from cp_jax.sim.types import SimConfig

        learned = [d.sim for d in egos if d.sim is not None]
        scene_cfg = learned[0] if learned else SimConfig(max_agents=16, obs_road=64, enable_idm=False)
        seed = suite.PROCEDURAL_SETS[self.scenes][0]
        return suite.procedural_suite(self.procedural_scenes, self.pairs, scene_cfg, seed, self.agents,
                                      cache_dir=self.cache_dir)


def from_section(section, **force) -> BenchConfig:
    """A BenchConfig from a config's `bench` section (unknown keys raise, naming them); `force` wins."""
    values = dict(section.to_dict() if hasattr(section, "to_dict") else section)
    known = {f.name for f in dataclasses.fields(BenchConfig)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"config.bench: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
    try:
        return BenchConfig(**{**values, **force})
    except ValueError as e:
        raise ValueError(str(e).replace("BenchConfig.", "config.bench.")) from None
