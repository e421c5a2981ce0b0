"""The CPU-scale comparison (issue #6's bar): every method x 3 post-training seeds from one anchor at
the same budget, then the benchmark, then Tables I and III over seeds (and II / IV / V for the
variants listed).

    python -m launch.sweep --config=experiments/sweep_small.py --out=runs/sweep
    python -m launch.sweep --config=experiments/sweep_small.py --config.variants="('counterplay','fixed10')" ...

Every counterplay variant inherits experiments/counterplay.py, which has had the student gate on
since session 11 (the tables in BUILD_NOTES from earlier sessions ran without it; cp_no_gate is that
method). Each variant is an experiment file plus overrides (dotted keys); runs are named VARIANT_sSEED and
land in OUT/runs/ (a finished run is not re-made: re-running the sweep resumes it). TABLE_II,
TABLE_IV and TABLE_V name the rows of those tables (label, variant); a row whose variant was not run
is left out. Table IV's other deployment styles (bench.deploy_styles) are benchmarked only for the
variants its rows name, on bench.deploy_splits.
"""

import ml_collections

VARIANTS = {
    # Table I / III: the method and its baselines.
    "counterplay": ("counterplay", {}),  # with the student gate (log traffic) since session 11
    # The method as published, without our student gate (every "counterplay" row before session 11).
    "cp_no_gate": ("counterplay", {"counterplay.student_gate": False}),
    "ppo_continue": ("ppo_continue", {}),
    "ppo_rewind": ("ppo_rewind", {}),
    "ppo_opponent": ("ppo_opponent", {}),
    "spiced": ("spiced", {}),
    "aggressive_distill": ("aggressive_distill", {}),
    "cautious_distill": ("cautious_distill", {}),
    # CounterPlay distilling the executed actions of verified retries (self-imitation), more steps.
    "counterplay_ce": ("counterplay", {"counterplay.target": "ce", "counterplay.distill_steps": 32,
                                       "counterplay.lr": 3e-4}),
    # counterplay_ce held closer to the anchor (session 10): a third of the lr, 5x the anchor KL, on
    # twice the regulariser states (counterplay_ce wrecked one of three b1 seeds).
    "counterplay_ce_anchored": ("counterplay", {"counterplay.target": "ce", "counterplay.distill_steps": 32,
                                                "counterplay.lr": 1e-4, "counterplay.anchor_kl": 0.5,
                                                "counterplay.reg_states": 8}),
    # CounterPlay with more distillation per round (KL target): 64 steps at lr 3e-4.
    "counterplay_strong": ("counterplay", {"counterplay.distill_steps": 64, "counterplay.lr": 3e-4}),
    # counterplay_strong without the deployment style among the retries: every verified retry then
    # has a teacher condition other than the student's, so the KL target always has a signal.
    "counterplay_offstyle": ("counterplay", {
        "counterplay.distill_steps": 64, "counterplay.lr": 3e-4,
        "counterplay.styles": ("cautious", "cautious_normal", "normal_aggressive", "aggressive")}),
    # The full method without the aggressive retry (session 10): on b13 its verified retries carried the
    # aggressive style's off-road exits into the normal condition.
    "cp_no_aggressive": ("counterplay", {
        "counterplay.styles": ("cautious", "cautious_normal", "normal", "normal_aggressive")}),
    # The full method held closer to the anchor away from the repaired states (session 10): 5x the
    # anchor KL on twice the regulariser states.
    "cp_anchor_kl": ("counterplay", {"counterplay.anchor_kl": 0.5, "counterplay.reg_states": 8}),
    # The full method with the student gate (session 11, ours): a round's update is kept only if the
    # distilled policy drives 16 training scenes (greedy, normal) no worse than before it.
    "cp_gate": ("counterplay", {"counterplay.student_gate": True, "counterplay.gate_traffic": "self",
                                "counterplay.gate_envs": 16}),
    # ... with the gate's episodes one policy ego among log-replayed traffic (8 scenes x every agent as ego):
    # the experiments/counterplay.py default since session 11, so the same runs as "counterplay".
    "cp_gate_log": ("counterplay", {"counterplay.student_gate": True, "counterplay.gate_traffic": "log",
                                    "counterplay.gate_envs": 8}),
    # The anchor KL under the deployment condition (session 11): the student's own (normal) behaviour is
    # held to the anchor's on fresh self-play states, not only the recorded conditions' behaviour.
    "cp_reg_deploy": ("counterplay", {"counterplay.reg_condition": "deploy"}),
    # The optional PPO term on the recorded episodes (session 12): no extra simulation; 32 steps a round
    # on 64 recorded states (~1.5 passes over a round's record), the distillation's steps alike.
    "cp_ppo": ("counterplay", {"counterplay.ppo_coef": 1.0, "counterplay.ppo_states": 64,
                               "counterplay.distill_steps": 32}),
    # ... at the default 8 steps a round (the PPO term's share of the optimisation is then a quarter).
    "cp_ppo8": ("counterplay", {"counterplay.ppo_coef": 1.0, "counterplay.ppo_states": 64}),
    # Timeout-focused CounterPlay (issue #6's timeout-repair bar): every searched failure a timeout.
    "cp_timeouts": ("counterplay", {"counterplay.failure_kinds": ("timeout",)}),
    # The deployed policy's own failures: records and branches with greedy actions, every recorded agent
    # under the deployment style (normal); the normal retry then repeats the factual one, so every
    # verified retry is another style's and carries a distillation signal.
    "cp_greedy_normal": ("counterplay", {"counterplay.greedy": True, "counterplay.record_style": "normal"}),
    # The deployment condition's own failures with sampled actions: every recorded agent under normal;
    # the normal retry then shares the factual branch's condition and key, so it passes only where the
    # failure does not recur (and teaches nothing); every other verified retry carries a signal, and the
    # re-run with fresh draws stays on.
    "cp_normal_record": ("counterplay", {"counterplay.record_style": "normal"}),
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
_ALL = ("normal", "halfway", "aggressive")
TABLE_IV = (  # the policy driven under each ego deployment condition
    ("Anchor", {s: "anchor" for s in _ALL}),
    ("PPO-Continue", {s: "ppo_continue" for s in _ALL}),
    ("Aggressive distillation", {s: "aggressive_distill" for s in _ALL}),
    ("Cautious distillation", {s: "cautious_distill" for s in _ALL}),
    ("CounterPlay, distilled for normal", {s: "counterplay" for s in _ALL}),
    ("CounterPlay, distilled for that condition", {"normal": "counterplay", "halfway": "deploy_halfway",
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
    c.bench = ml_collections.ConfigDict(dict(
        splits=("interactive", "random"), regimes=("all",), ego_styles=("normal",), seeds=1,
        pairs=200, procedural_scenes=60, procedural_seed=300_000, figures=4,
        ppo_policy="assets/anchors/ppo_small", bc_policy="assets/anchors/smart_bc",
        # Table IV: these ego styles too, for the variants TABLE_IV names, on these splits (() skips it).
        deploy_styles=("halfway", "aggressive"), deploy_splits=("interactive",),
    ))
    return c
