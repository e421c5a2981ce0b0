"""The CPU-scale comparison (issue #6's bar): every method x 3 post-training seeds from one anchor at
the same budget, then the benchmark, then Tables I and III over seeds (and II / IV / V for the
variants listed).

    python -m launch.sweep --config=experiments/sweep_small.py --out=runs/sweep
    python -m launch.sweep --config=experiments/sweep_small.py --config.variants="('counterplay','fixed10')" ...

Only the methods and the paper tables' variants live here (probes that did not earn a place are listed
in docs/decisions.md). Every counterplay variant inherits experiments/counterplay.py (student gate on;
cp_no_gate is the method as published). Each variant is an experiment file plus overrides (dotted
keys); runs are named VARIANT_sSEED and land in OUT/runs/ (a finished run is not re-made: re-running
the sweep resumes it). TABLE_II, TABLE_IV and TABLE_V name the rows of those tables (label, variant),
PAIRS_II the variants Table II also compares with each other (a, b); a row whose variant was not run is
left out. Table IV's other deployment styles (deploy.styles) are benchmarked only for the variants its
rows name, on deploy.splits.
"""

import ml_collections

from cp_jax.bench.config import BenchConfig
from cp_jax.jobs.config import section

VARIANTS = {
    # Table I / III: the method and its baselines.
    "counterplay": ("counterplay", {}),  # the shipped experiment: fixed rewind 30, with the student gate (ours)
    # The method as published, without our student gate.
    "cp_no_gate": ("counterplay", {"counterplay.student_gate": False}),
    "ppo_continue": ("ppo_continue", {}),
    "ppo_rewind": ("ppo_rewind", {}),
    "ppo_opponent": ("ppo_opponent", {}),
    "spiced": ("spiced", {}),
    "aggressive_distill": ("aggressive_distill", {}),
    "cautious_distill": ("cautious_distill", {}),
    # Table II: components (each off, the rest on) and the root rule (counterplay itself is fixed30).
    "no_backtrack": ("counterplay", {"counterplay.root_rule": "none"}),
    "no_style": ("counterplay", {"counterplay.condition_search": False}),
    "no_verify": ("counterplay", {"counterplay.verify_others": False, "counterplay.reverify": False}),
    "no_deploy": ("counterplay", {"counterplay.deploy_distill": False}),
    "fixed10": ("counterplay", {"counterplay.root_rule": "fixed", "counterplay.window": 10}),
    "fixed50": ("counterplay", {"counterplay.root_rule": "fixed", "counterplay.window": 50}),
    "value30": ("counterplay", {"counterplay.root_rule": "value", "counterplay.window": 30}),
    # Table IV: deployment condition.
    "deploy_halfway": ("counterplay", {"counterplay.deploy_style": "halfway", "eval.style": "halfway"}),
    "deploy_aggressive": ("counterplay", {"counterplay.deploy_style": "aggressive", "eval.style": "aggressive"}),
    # Table V: one style searched.
    **{f"only_{s}": ("counterplay", {"counterplay.styles": (s,)})
       for s in ("cautious", "cautious_normal", "normal", "normal_aggressive", "aggressive")},
}

TABLE_II = (  # components and root rule (the paper: anchor, PPO-Continue, fixed 10 / 30 / 50, value rule)
    ("Anchor", "anchor"),
    ("PPO-Continue", "ppo_continue"),
    ("CounterPlay: B C S D, fixed rewind 30 (experiments/counterplay.py)", "counterplay"),
    ("B off: root = episode start", "no_backtrack"),
    ("C off: retries keep the original condition", "no_style"),
    ("S off: no check of other cars, no re-run", "no_verify"),
    ("D off: student under the original condition", "no_deploy"),
    ("B: fixed rewind 10", "fixed10"),
    ("B: fixed rewind 50", "fixed50"),
    ("B: value rule over 30 decisions (DESIGN default)", "value30"),
)
PAIRS_II = (  # the root rules against each other (CounterPlay is fixed 30): the paper orders 30 > 50 > 10
    ("counterplay", "fixed50"), ("counterplay", "fixed10"), ("fixed50", "fixed10"),
    ("value30", "counterplay"), ("value30", "fixed50"), ("value30", "fixed10"),
)
_ALL = ("normal", "halfway", "aggressive")
TABLE_IV = (  # the policy driven under each ego deployment condition
    ("Anchor", {s: "anchor" for s in _ALL}),
    ("PPO-Continue", {s: "ppo_continue" for s in _ALL}),
    ("Aggressive distillation", {s: "aggressive_distill" for s in _ALL}),
    ("Cautious distillation", {s: "cautious_distill" for s in _ALL}),
    ("CounterPlay (gated), distilled for normal", {s: "counterplay" for s in _ALL}),
    ("CounterPlay as published (no gate), distilled for normal", {s: "cp_no_gate" for s in _ALL}),
    ("CounterPlay (gated), distilled for that condition", {"normal": "counterplay", "halfway": "deploy_halfway",
                                                            "aggressive": "deploy_aggressive"}),
)
TABLE_V = (  # styles searched
    ("All five", "counterplay"),
    ("Cautious", "only_cautious"),
    ("Cautious–normal midpoint", "only_cautious_normal"),
    ("Normal", "only_normal"),
    ("Normal–aggressive midpoint", "only_normal_aggressive"),
    ("Aggressive", "only_aggressive"),
)


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.anchor = "assets/anchors/conditioned_small"
    c.budget_frac = 0.05  # of the anchor's training transitions, every run
    c.seeds = (0, 1, 2)
    c.variants = ("counterplay", "ppo_continue", "ppo_rewind", "ppo_opponent", "spiced", "aggressive_distill",
                  "cautious_distill")
    c.bench = section(BenchConfig, exclude=("anchor_policy",), figures=4)  # the anchor is also the traffic anchor
    # Table IV: these ego styles too, for the variants TABLE_IV names, on these splits (() skips it).
    c.deploy = ml_collections.ConfigDict(dict(styles=("halfway", "aggressive"), splits=("interactive",)))
    return c
