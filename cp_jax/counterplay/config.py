"""CounterPlayConfig: the static switches and sizes of one post-training round (hashable).

The defaults are the full method as DESIGN.md section 6 describes it: value-based backtracking over
H = 30 decisions (B), five retry styles (C), safety verification with a re-run under fresh random
numbers (S), distillation under the deployment condition (D), no student gate. What the shipped
experiment changes (experiments/counterplay.py: a fixed rewind, the gate) is stated there.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cp_jax.sim import conditions

FAILURE_KINDS = ("timeout", "collision", "offroad")
ROOT_RULES = ("value", "fixed", "none")


@dataclasses.dataclass(frozen=True)
class CounterPlayConfig:
    """Static CounterPlay settings. One compiled round per config."""

    # Record: self-play episodes per round, one scene of the bank each, conditions sampled per agent
    # (DESIGN ranges), actions sampled.
    num_envs: int = 16
    # > 1: the bank is grouped [bank_groups, S / bank_groups, ...] (`env.group_bank`) and record env b
    # draws its scene from group b * bank_groups // num_envs only; with the groups split over the
    # devices (`parallel.shard_groups`) every device holds and reads S / bank_groups scenes per group
    # it owns, not the whole bank. Later stages read scenes from the recording, not the bank.
    bank_groups: int = 1
    # Snapshots: the record keeps the state before every k-th step (k = 1: every step). A root
    # between two snapshots is reached by replaying the recorded policy from the one before it
    # (at most k - 1 steps per failure, not charged to the budget: those transitions exist).
    snapshot_every: int = 1
    # Failures processed per round (a random subset of those found; fewer found = masked slots).
    max_failures: int = 16
    failure_kinds: tuple[str, ...] = FAILURE_KINDS
    # Backtracking (B): "value" = argmax of the failing agent's V(o_t, c) over [t_fail - H, t_fail - 1];
    # "fixed" = t_fail - H; "none" = no backtracking, the retry starts from the episode's first frame (ours).
    root_rule: str = "value"
    window: int = 30  # H, in decisions (steps)
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
    # original condition (the one it failed under). Target: KL(teacher || student), the teacher being
    # the policy under the retry style on the same states.
    deploy_style: str = "normal"
    deploy_distill: bool = True
    # Optimisation per round.
    distill_steps: int = 8  # gradient steps per round
    distill_batch: int = 256  # distillation samples per step (drawn from the round's buffer)
    reg_states: int = 4  # recorded (env, step) states per step for the anchor regulariser (x max_agents rows)
    anchor_kl: float = 0.1  # coefficient of KL(anchor || student) on fresh self-play states
    value_coef: float = 0.5  # coefficient of the critic held to the anchor's on the same states
    lr: float = 1e-4
    max_grad_norm: float = 0.5
    # Student gate (ours, cp_jax/counterplay/gate.py): after distilling, old and new policy drive
    # gate_envs random training scenes greedily under the deployment condition, each controllable agent
    # as the one policy ego among log-replayed traffic; the update is kept only if goals - collisions -
    # off-road exits do not fall. Its agent-steps count in the budget.
    student_gate: bool = False
    gate_envs: int = 16

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if self.root_rule not in ROOT_RULES:
            raise ValueError(f"CounterPlayConfig.root_rule: unknown {self.root_rule!r}; use {'|'.join(ROOT_RULES)}")
        for name in ("num_envs", "max_failures", "window", "samples_per_style", "distill_steps", "distill_batch",
                     "reg_states", "snapshot_every", "bank_groups", "gate_envs"):
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
        for name in (*self.styles, self.deploy_style):
            conditions.style(name)  # raises for an unknown style
        for name in ("anchor_kl", "value_coef"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"CounterPlayConfig.{name} must be >= 0, got {getattr(self, name)!r}")
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
        scaled = lambda c: np.asarray(conditions.scale(c))  # noqa: E731
        dist = np.linalg.norm(scaled(self.style_matrix()) - scaled(conditions.STYLES[self.deploy_style]), axis=-1)
        order = np.lexsort((np.arange(len(dist)), dist))
        rank = np.empty(len(dist), np.int32)
        rank[order] = np.arange(len(dist), dtype=np.int32)
        return rank
