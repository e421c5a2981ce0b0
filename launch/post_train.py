"""Post-train an anchor: CounterPlay or a baseline, at a fixed transition budget.

    python -m launch.post_train --config=experiments/counterplay.py --workdir=runs/cp
    python -m launch.post_train --config=experiments/ppo_continue.py --config.anchor=DIR --workdir=runs/ppo_c

Everything is validated (and the anchor read) before any scene is generated (cp_jax/jobs/post_train.py,
whose METHODS registry lists the methods). The workdir gets run_info.json, metrics.jsonl + TensorBoard
scalars (one row per round / update: failures by kind, roots, retries passing by style, samples,
losses, budget spent), eval.jsonl (validation split, greedy, deployment style), orbax checkpoints
(re-running the command resumes), policy/ (the post-trained policy), post_train.json and
diagnostics.png.
"""

from __future__ import annotations

import json
import os
import time

from absl import flags, logging

from launch import cli, multihost

flags.DEFINE_string("workdir", None, "run folder (created; an existing run there is resumed)")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "counterplay.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    multihost.init()
    from cp_jax.jobs import loop, post_train

    with cli.checking():
        setup = post_train.resolve(FLAGS.config)  # validates every field before any work
        loop.check_resume(FLAGS.workdir, FLAGS.config, post_train.RESUME_SAFE)  # resume only under its config
    logging.info("%s", post_train.describe(setup))
    print(f"{setup.method.name}: budget {setup.budget:,.0f} agent-steps -> {FLAGS.workdir}")
    t0 = time.perf_counter()
    result = post_train.post_train(FLAGS.config, FLAGS.workdir)
    print(json.dumps({k: v for k, v in result.items() if k != "params"}, indent=1))
    print(f"done in {time.perf_counter() - t0:.0f}s -> {FLAGS.workdir}")


if __name__ == "__main__":
    cli.run(main, required=("workdir",))
