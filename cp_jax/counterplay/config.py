"""CounterPlayConfig: the static switches and sizes of one post-training round (hashable).

Every choice the paper does not state is a field here (DESIGN.md section 6); the defaults are the
full method: value-based backtracking over H = 30 decisions (B), five retry styles (C), safety
verification with a re-run under fresh random numbers (S), distillation under the deployment
condition (D).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cp_jax.sim import conditions

FAILURE_KINDS = ("timeout", "collision", "offroad")
METHODS = ("counterplay", "style_distill")


@dataclasses.dataclass(frozen=True)
class CounterPlayConfig:
    """Static CounterPlay settings. One compiled round per config."""

    method: str = "counterplay"  # counterplay | style_distill (aggressive / cautious distillation baseline)
    # Record: self-play episodes per round, one scene of the bank each, conditions sampled per agent
    # (DESIGN ranges) or, with record_style set, every agent under that named style.
    num_envs: int = 16
    record_style: str = ""
    # > 1: the bank is grouped [bank_groups, S / bank_groups, ...] (`env.group_bank`) and record env b
    # draws its scene from group b * bank_groups // num_envs only; with the groups split over the
    # devices (`parallel.shard_groups`) every device holds and reads S / bank_groups scenes per group
    # it owns, not the whole bank. Later stages read scenes from the recording, not the bank.
    bank_groups: int = 1
    # Actions in records and branches: sampled (DESIGN: common random numbers make branches
    # comparable) or greedy (argmax, as the benchmark drives; the re-run is then a repeat).
    greedy: bool = False
    # Snapshots: the record keeps the state before every k-th step (k = 1: every step). A root
    # between two snapshots is reached by replaying the recorded policy from the one before it
    # (at most k - 1 steps per failure, not charged to the budget: those transitions exist).
    snapshot_every: int = 1
    # Failures processed per round (a random subset of those found; fewer found = masked slots).
    max_failures: int = 16
    failure_kinds: tuple[str, ...] = FAILURE_KINDS
    # Backtracking (B): "value" = argmax of V over [t_fail - H, t_fail - 1]; "fixed" = t_fail - H;
    # "none" = no backtracking, the retry starts from the episode's first frame (ours).
    root_rule: str = "value"
    window: int = 30  # H, in decisions (steps)
    # The value the root rule maximises: V under the agent's own (recorded) condition, under the
    # deployment style, or the best over the retry styles (ours: DESIGN says V(o_t, c)).
    root_value: str = "own"
    # Style search (C): one retry per style (and sample); off = retries keep the original condition
    # and differ only in their random numbers (one retry per style slot, distinct keys).
    styles: tuple[str, ...] = conditions.RETRY_STYLES
    samples_per_style: int = 1
    condition_search: bool = True
    # Verification (S): own goal without own collision / off-road, no other agent with a new or
    # earlier collision / off-road than in the factual branch, then a re-run of factual + the chosen
    # retry with a fresh shared key. Off: the own-goal check only, no re-run.
    verify_others: bool = True
    reverify: bool = True
    # Distillation (D): the student sees the deployment condition; off = the failing agent's
    # original condition (the one it failed under).
    deploy_style: str = "normal"
    deploy_distill: bool = True
    target: str = "kl"  # kl: KL(teacher || student), teacher = policy under the retry style; ce: executed actions
    # style_distill only: the teacher's style on recorded self-play states (no search, no verification).
    teacher_style: str = "aggressive"
    # Optimisation per round.
    distill_steps: int = 8  # gradient steps per round
    distill_batch: int = 256  # distillation samples per step (drawn from the round's buffer)
    reg_states: int = 4  # recorded (env, step) states per step for the anchor regulariser (x max_agents rows)
    anchor_kl: float = 0.1  # coefficient of KL(anchor || student) on fresh self-play states
    # ... under the rows' recorded conditions, the deployment condition, or the mean of both (distill.py)
    reg_condition: str = "recorded"
    critic: str = "keep"  # keep: V held to the anchor's on fresh states; distill: also V(deploy) -> V_teacher(retry)
    value_coef: float = 0.5
    lr: float = 1e-4
    max_grad_norm: float = 0.5
    # The optional PPO term (DESIGN section 6): + ppo_coef x PPO's clipped surrogate on ppo_states recorded
    # states per gradient step (every POLICY agent's row under its recorded condition; the executed action
    # and its log-probability under the recording policy; GAE advantages over the recorded episode from
    # the critic, bootstrapped at the time limit). No extra simulation: the record is already charged.
    # 0: off (the published method).
    ppo_coef: float = 0.0
    ppo_states: int = 16
    ppo_clip: float = 0.2
    ppo_gamma: float = 0.98
    ppo_lambda: float = 0.95
    # Student gate (ours, cp_jax/counterplay/gate.py): after distilling, old and new policy drive the
    # same gate_envs random training scenes greedily under the deployment condition; the update is kept
    # only if goals - collisions - off-road exits do not fall. Its agent-steps count in the budget.
    student_gate: bool = False
    gate_envs: int = 16
    gate_traffic: str = "self"  # self: every agent the policy; log: one policy ego per episode, others replay logs

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        choices = dict(method=METHODS, root_rule=("value", "fixed", "none"), target=("kl", "ce"),
                       root_value=("own", "deploy", "best_style"), reg_condition=("recorded", "deploy", "both"),
                       gate_traffic=("self", "log"),
                       critic=("keep", "distill"))
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"CounterPlayConfig.{name}: unknown {getattr(self, name)!r}; use {'|'.join(allowed)}")
        for name in ("num_envs", "max_failures", "window", "samples_per_style", "distill_steps", "distill_batch",
                     "reg_states", "snapshot_every", "bank_groups", "gate_envs", "ppo_states"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"CounterPlayConfig.{name} must be a positive int, got {value!r}")
        if self.num_envs % self.bank_groups:
            raise ValueError(f"CounterPlayConfig.bank_groups ({self.bank_groups}) must divide num_envs "
                             f"({self.num_envs})")
        if self.student_gate and self.gate_envs % self.bank_groups:
            raise ValueError(f"CounterPlayConfig.bank_groups ({self.bank_groups}) must divide gate_envs "
                             f"({self.gate_envs})")
        if not self.failure_kinds or set(self.failure_kinds) - set(FAILURE_KINDS):
            raise ValueError(f"CounterPlayConfig.failure_kinds must be a non-empty subset of {FAILURE_KINDS}, "
                             f"got {self.failure_kinds!r}")
        if not self.styles:
            raise ValueError("CounterPlayConfig.styles must name at least one style")
        for name in (*self.styles, self.deploy_style, self.teacher_style):
            conditions.style(name)  # raises for an unknown style
        if self.record_style:
            conditions.style(self.record_style)
        for name in ("anchor_kl", "value_coef", "ppo_coef"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"CounterPlayConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("ppo_gamma", "ppo_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"CounterPlayConfig.{name} must be in [0, 1], got {getattr(self, name)!r}")
        if not self.ppo_clip > 0:
            raise ValueError(f"CounterPlayConfig.ppo_clip must be > 0, got {self.ppo_clip!r}")
        if self.method == "style_distill" and self.target != "kl":
            raise ValueError("CounterPlayConfig.target must be 'kl' for style_distill (no executed actions to copy)")
        if not self.lr > 0 or not self.max_grad_norm > 0:
            raise ValueError("CounterPlayConfig.lr and max_grad_norm must be > 0")

    @property
    def num_retries(self) -> int:
        """Retry branches per failure and sample (one per style)."""
        return len(self.styles)

    def style_matrix(self) -> np.ndarray:
        """[num_retries, COND_DIM] the retry conditions, in `styles` order."""
        return np.stack([conditions.STYLES[s] for s in self.styles])

    def style_rank(self) -> np.ndarray:
        """[num_retries] int rank of each retry style by closeness to the deployment condition
        (0 = closest; distance between scaled condition vectors; ties by order in `styles`)."""
        scaled = lambda c: 2.0 * (c - conditions.COND_LOW) / (conditions.COND_HIGH - conditions.COND_LOW) - 1.0  # noqa: E731
        dist = np.linalg.norm(scaled(self.style_matrix()) - scaled(conditions.STYLES[self.deploy_style]), axis=-1)
        order = np.lexsort((np.arange(len(dist)), dist))
        rank = np.empty(len(dist), np.int32)
        rank[order] = np.arange(len(dist), dtype=np.int32)
        return rank
