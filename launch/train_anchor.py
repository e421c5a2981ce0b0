"""Train a self-play PPO policy (the reward-conditioned anchor, or the non-conditioned PPO baseline).

    python -m launch.train_anchor --config=experiments/anchor_small.py --workdir=runs/anchor_small
    python -m launch.train_anchor --config=experiments/ppo_small.py --workdir=runs/ppo_small

Everything is validated before any scene is generated (cp_jax/jobs/train.py). The workdir gets
run_info.json (resolved config, git revision), metrics.jsonl and TensorBoard scalars (tb/), orbax
checkpoints (checkpoints/, every train.ckpt_every updates, the last train.keep kept), held-out
evaluations (eval.jsonl, and eval.json at the end), curve.png and the policy (policy/). Re-running
the same command resumes from the latest checkpoint: the result equals an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import time

from absl import flags

from launch import cli, multihost

flags.DEFINE_string("workdir", None, "run folder (created; an existing run there is resumed)")
cli.config_file(
    os.path.join(os.path.dirname(__file__), "..", "experiments", "anchor_small.py"),
    "experiment file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def main(_):
    multihost.init()
    from cp_jax.jobs import loop, train

    with cli.checking():
        train.resolve(FLAGS.config)  # validates every field before any work
        loop.check_resume(FLAGS.workdir, FLAGS.config)  # a folder's checkpoints resume only under its config
    t0 = time.perf_counter()
    result = train.train(FLAGS.config, FLAGS.workdir)
    print(json.dumps(result["final_eval"], indent=1))
    print(f"done in {time.perf_counter() - t0:.0f}s -> {FLAGS.workdir}")


if __name__ == "__main__":
    cli.run(main, required=("workdir",))
