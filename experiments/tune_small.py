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

The search is around the values the experiment files hold now. Session 34 ran it at commit f2ccfee, when
they held the first choices (lr 1e-4 everywhere, window 30, share 0.2, weight 0.1); its choices are in
the files since (docs/measurements/results.md, "Baseline tuning").
"""

import importlib

import ml_collections

from cp_jax.bench.config import BenchConfig
from cp_jax.jobs.config import section

LRS = {"3e-5": 3e-5, "1e-4": 1e-4, "3e-4": 3e-4}
KNOBS = {  # method: (dotted key, {label: value})
    "ppo_rewind": ("counterplay.window", {"w10": 10, "w30": 30, "w50": 50}),
    "ppo_opponent": ("ppo.opponent_frac", {"opp0.1": 0.1, "opp0.2": 0.2, "opp0.4": 0.4}),
    "spiced": ("ppo.bc_coef", {"bc0.03": 0.03, "bc0.1": 0.1, "bc0.3": 0.3}),
}
METHODS = ("counterplay", "ppo_continue", "ppo_rewind", "ppo_opponent", "spiced")
_LR_KEY = {"counterplay": "counterplay.lr"}  # the PPO methods: ppo.lr


def _file_value(method: str, dotted: str):
    """The value the method's experiment file sets now."""
    section, field = dotted.split(".")
    return importlib.import_module(f"experiments.{method}").get_config()[section][field]


VARIANTS = {}
for _m in METHODS:
    _key = _LR_KEY.get(_m, "ppo.lr")
    for _label, _lr in LRS.items():  # PPO-Continue at its file's values is "ppo_continue" (the tables' baseline)
        _own = _m == "ppo_continue" and _lr == _file_value(_m, _key)
        VARIANTS["ppo_continue" if _own else f"{_m}_lr{_label}"] = (_m, {_key: _lr})
VARIANTS.setdefault("ppo_continue", ("ppo_continue", {}))
for _m, (_key, _values) in KNOBS.items():
    for _label, _value in _values.items():
        if _value != _file_value(_m, _key):  # the file's own value is the run of the file's lr above
            VARIANTS[f"{_m}_{_label}"] = (_m, {_key: _value})

TABLE_II = tuple((name, name) for name in VARIANTS)  # one line per setting, both splits
TITLE_II = "Baseline tuning (validation)"
TABLE_IV = ()
TABLE_V = ()


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.anchor = "assets/anchors/conditioned_small"
    c.budget_frac = 0.01  # the main job's budget
    c.seeds = (0, 1, 2)
    c.variants = tuple(VARIANTS)
    c.bench = section(BenchConfig, exclude=("anchor_policy",), figures=0)
    c.deploy = ml_collections.ConfigDict(dict(styles=(), splits=("interactive",)))
    return c
