"""The resumable loop every training job shares: a run folder, checkpoints, logs, progress.

    run = Run(workdir, config, keep=3, eval_key="update")    # run_info.json written, logs opened
    state, done = run.restore(state)                         # the newest readable checkpoint, logs cut back
    state, done = run.iterate(state, step, done, more, after, ckpt_every)
    run.close()

A run folder holds run_info.json (the resolved config and git revision), metrics.jsonl and
TensorBoard scalars (tb/), orbax checkpoints (checkpoints/, the newest `keep`) and the job's
evaluations (eval.jsonl, one line per evaluation keyed by `eval_key`). A resumed run first cuts
every log back to the restored step, so it writes the rest again exactly as an uninterrupted run
would. In a multi-host run only process 0 writes files (orbax writes checkpoints from all).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

import jax
from absl import logging
from flax import serialization

from cp_jax.io.checkpoints import Checkpointer
from cp_jax.io.metrics import MetricWriter, truncate_jsonl
from cp_jax.io.run_info import write_run_info

FAULT_ENV = "CP_JAX_FAULT_KILL_AT"  # tests only: SIGKILL the process right after that step


def check_resumable(workdir: str, section: str, num_groups: int) -> None:
    """Refuse to resume checkpoints made with other scene groups (config.<section>.bank_groups): their
    scene indices would point into other groups (run_info.json of the earlier run holds its config)."""
    info, ckpts = os.path.join(workdir, "run_info.json"), os.path.join(workdir, "checkpoints")
    if not (os.path.exists(info) and os.path.isdir(ckpts) and os.listdir(ckpts)):
        return
    with open(info) as f:
        before = (json.load(f).get("config", {}).get(section) or {}).get("bank_groups", 1)
    if before != num_groups:
        raise ValueError(f"config.{section}.bank_groups ({num_groups}): {workdir} holds checkpoints of a run with "
                         f"bank_groups={before}; resume with that value or start in a new --workdir")


class Run:
    """A run folder (module docstring). eval_key: the step's name in eval.jsonl ("update", "round")."""

    def __init__(self, workdir: str, config, keep: int, eval_key: str = "step"):
        self.workdir = workdir
        self.primary = jax.process_index() == 0
        self.eval_key = eval_key
        os.makedirs(workdir, exist_ok=True)
        if self.primary:
            write_run_info(workdir, config)
        self.ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=keep)
        self.writer = MetricWriter(workdir, enabled=self.primary)

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def restore(self, state) -> tuple[Any, int]:
        """(state, steps done): the newest readable checkpoint shaped like `state`, or (state, 0). The
        logs then hold exactly the steps before it (none when starting afresh)."""
        restored = self.ckpt.restore(serialization.to_state_dict(state))
        done = 0
        if restored is not None:
            done, tree = restored
            state = serialization.from_state_dict(state, tree)
            logging.info("resumed from %s %d", self.eval_key, done)
        self.writer.truncate_after(done)
        if self.primary:
            truncate_jsonl(self.path("eval.jsonl"), self.eval_key, done if restored is not None else -1)
        return state, done

    def append_eval(self, step: int, row: dict) -> None:
        """One line of eval.jsonl: {eval_key: step, **row} (process 0 only)."""
        if self.primary:
            with open(self.path("eval.jsonl"), "a") as f:
                f.write(json.dumps({self.eval_key: step, **row}) + "\n")

    def iterate(self, state, step: Callable, done: int, more: Callable[[Any, int], bool],
                after: Callable[[int, Any, Any, bool], None], ckpt_every: int) -> tuple[Any, int]:
        """Run `state, stats = step(state)` while more(state, done); after each: after(done, state, stats,
        last) (logs, evaluations, progress), then a checkpoint every ckpt_every steps and at the last."""
        while more(state, done):
            state, stats = step(state)
            done += 1
            last = not more(state, done)
            after(done, state, stats, last)
            if done % ckpt_every == 0 or last:
                self.ckpt.save(done, serialization.to_state_dict(state))
            if os.environ.get(FAULT_ENV) == str(done):  # fault injection for the resume tests: a real SIGKILL
                os.kill(os.getpid(), signal.SIGKILL)
        return state, done

    def close(self) -> None:
        self.writer.close()
        self.ckpt.close()


def plot(fn: Callable, *args) -> None:
    """Call a plotting function; a plot never fails a finished run."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        logging.warning("plot not written: %s", e)
