"""CounterPlay post-training: record -> failures -> backtrack -> branch -> verify -> distill.

config.py     CounterPlayConfig: every switch of the method and its ablations (B, C, S, D, H, styles)
selfplay.py   drive(): self-play from any snapshot (records, branches, re-runs share it)
record.py     self-play episodes with per-step snapshots and critic values; failures; picking them
backtrack.py  the root of each failure (value-based, fixed rewind, or none) and restoring it
branch.py     factual + one retry per style from each root, common random numbers
verify.py     own success, no harm to others, choosing the retry
distill.py    the distillation loss (teacher under the retry style, student under the deployment one)
gate.py       the student gate (ours): keep a round's update only if the student drives no worse
loop.py       one jitted round and the PostState it carries (params, optimiser, key, budget spent)
"""
