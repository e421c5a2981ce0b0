"""Aggressive distillation: the anchor's own behaviour under the aggressive style, distilled into the deployment
condition on recorded self-play states; no search, no verification (experiments/counterplay.py's budget).

    python -m launch.post_train --config=experiments/aggressive_distill.py --workdir=runs/aggressive_distill
"""

import ml_collections

from experiments import counterplay


def get_config() -> ml_collections.ConfigDict:
    c = counterplay.get_config()
    c.method = "aggressive_distill"
    c.counterplay.student_gate = False  # no verification of any kind: the baseline as published
    return c
