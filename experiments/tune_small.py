"""Issue #32's baseline tuning, on the VALIDATION sets only: every Table I method gets the same search,
one factor at a time around its experiment file's values — the learning rate x 3 (3e-5, 1e-4, 3e-4) and
its own main knob x 3 (PPO-Rewind: the rewind window; PPO-Opponent: the opponent share; SPICED: the
human-likelihood weight) — 3 post-training seeds each at 1% budget, benchmarked on the procedural
validation splits (seeds 300000+).

    python -m launch.sweep --config=experiments/tune_small.py --out=runs/tune

The rule (docs/decisions.md, "Baseline tuning"): per method and factor, the value with the highest
score (ours, the mean of the Interactive and Random means over seeds) is written into the method's
experiment file; the results command then runs those files unchanged. CounterPlay's learning rate is
searched on the gated method (experiments/counterplay.py) and shared by cp_no_gate.
"""

import ml_collections

from cp_jax.bench.config import BenchConfig
from cp_jax.jobs.config import section

LRS = {"3e-5": 3e-5, "1e-4": 1e-4, "3e-4": 3e-4}
KNOBS = {  # method: (dotted key, {label: value}); the experiment file's own value is searched too
    "ppo_rewind": ("counterplay.window", {"w10": 10, "w30": 30, "w50": 50}),
    "ppo_opponent": ("ppo.opponent_frac", {"opp0.1": 0.1, "opp0.2": 0.2, "opp0.4": 0.4}),
    "spiced": ("ppo.bc_coef", {"bc0.03": 0.03, "bc0.1": 0.1, "bc0.3": 0.3}),
}
_LR_KEY = {"counterplay": "counterplay.lr"}  # the PPO methods: ppo.lr

VARIANTS = {
    **{f"{m}_lr{label}": (m, {_LR_KEY.get(m, "ppo.lr"): lr})
       for m in ("counterplay", "ppo_continue", "ppo_rewind", "ppo_opponent", "spiced") for label, lr in LRS.items()},
    **{f"{m}_{label}": (m, {key: value}) for m, (key, values) in KNOBS.items() for label, value in values.items()},
    "ppo_continue": ("ppo_continue", {}),  # the file's own values: the baseline of the difference tables
}
del VARIANTS["ppo_continue_lr1e-4"]  # = ppo_continue

TABLE_II = tuple((name, name) for name in VARIANTS)  # one line per setting, both splits
TITLE_II = "Baseline tuning (validation)"
TABLE_IV = ()
TABLE_V = ()


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.anchor = "assets/anchors/conditioned_small"
    c.budget_frac = 0.01  # the main job's budget
    c.seeds = (0, 1, 2)
    # Every setting except those equal to the experiment file's (the knob at its file value is the
    # lr-1e-4 run of the same method).
    c.variants = tuple(n for n in VARIANTS if n not in ("ppo_rewind_w30", "ppo_opponent_opp0.2", "spiced_bc0.1"))
    c.bench = section(BenchConfig, exclude=("anchor_policy",), figures=0)
    c.deploy = ml_collections.ConfigDict(dict(styles=(), splits=("interactive",)))
    return c
