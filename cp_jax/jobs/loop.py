"""The resumable loop every training job shares: a run folder, checkpoints, logs, progress.

    run = Run(workdir, config, keep=3, eval_key="update")    # run_info.json written, logs opened
    state, done = run.restore(state)                         # the newest readable checkpoint, logs cut back
    state, done = run.iterate(state, step, done, more, after, ckpt_every)
    run.close()

A run folder holds run_info.json (the resolved config and git revision), metrics.jsonl and
TensorBoard scalars (tb/), orbax checkpoints (checkpoints/, the newest `keep`) and the job's
evaluations (eval.jsonl, one line per evaluation keyed by `eval_key`). A resumed run first cuts
every log back to the restored step, so it writes the rest again exactly as an uninterrupted run
would. A folder that holds checkpoints is resumed only under the config it was made with (every
field but `SAFE_ON_RESUME`'s, which are printed as a note): another is refused before any file is
touched, and so is a folder holding anything else than a run (check_resume). A step whose
parameters or losses are not finite is never checkpointed: the run stops with `Diverged`, the last
good checkpoint kept. In a multi-host run only process 0 writes files (orbax writes checkpoints from
all).
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import logging
from flax import serialization

from cp_jax.io.checkpoints import Checkpointer
from cp_jax.io.metrics import MetricWriter, truncate_jsonl
from cp_jax.io.run_info import write_run_info

FAULT_ENV = "CP_JAX_FAULT_KILL_AT"  # tests only: SIGKILL the process right after that step


# Config fields a run may be resumed with changed: they decide what is logged, kept or shown, or how the same
# program is laid out over devices, never what is computed (dotted paths under the config's root).
SAFE_ON_RESUME = frozenset({"train.progress", "train.log_every", "train.keep", "train.ckpt_every", "train.eval_every",
                            "train.devices", "scenes.cache_dir"})  # (a bank built in memory is the cached one)
# What a run folder holds before its first checkpoint (Run, and the jobs' own files written before it): a folder
# with only these and the same config is that run stopped early, started again from scratch.
RUN_START = frozenset({"run_info.json", "metrics.jsonl", "eval.jsonl", "tb", "checkpoints", "labels.json",
                       "run_info.json.tmp", "metrics.jsonl.tmp"})  # the .tmp: a write a kill interrupted


class Diverged(RuntimeError):
    """A training step produced non-finite parameters or losses; the run stopped before checkpointing it."""


def _plain(config) -> dict:
    """A config as run_info.json stores it (JSON types: tuples as lists, other objects as strings)."""
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return json.loads(json.dumps(cfg, default=str))


def config_changes(before: dict, now: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """[(dotted field, value before, value now)] where two stored configs differ ("<absent>" for a missing field)."""
    out = []
    for k in sorted(set(before) | set(now), key=str):
        a, b = before.get(k, "<absent>"), now.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append((f"{prefix}{k}", a, b))
    return out


def refused_changes(workdir: str, config, safe: frozenset[str] = SAFE_ON_RESUME) -> list[tuple[str, object, object]]:
    """config_changes between a run folder's run_info.json and `config`, less the `safe` fields."""
    changes = config_changes(_stored_config(os.path.join(workdir, "run_info.json")), _plain(config))
    return [c for c in changes if c[0] not in safe]


def _stored_config(path: str) -> dict:
    """The config a run folder's run_info.json holds; ValueError naming the file when it is unreadable."""
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: unreadable ({e}), so the run's config cannot be compared with this one; "
                         "start in a new --workdir") from None
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise ValueError(f"{path}: holds no 'config' section, so the run's config cannot be compared with this "
                         "one; start in a new --workdir")
    return info["config"]


def check_resume(workdir: str, config, safe: frozenset[str] = SAFE_ON_RESUME) -> None:
    """Refuse a --workdir this run must not write into, before any file is touched (every refusal a
    ValueError naming the folder or file):
    - a file, not a folder;
    - checkpoints without a readable run_info.json (the config they were made with cannot be compared);
    - checkpoints made under another config (its run_info.json): every changed field but the `safe` ones, all
      named in one error; the safe ones are printed as a note;
    - no checkpoint but other files than those a run writes before its first one (`RUN_START`: an exported
      policy, a finished run's outputs...), or those files from a run with another config (or none readable).
    Nothing happens for a missing or empty folder, or the start of the same run stopped before its first
    checkpoint (restarted from scratch)."""
    if not os.path.exists(workdir):
        return
    if not os.path.isdir(workdir):
        raise ValueError(f"{workdir}: a file, not a run folder; choose another --workdir")
    names = set(os.listdir(workdir))
    if not names:
        return
    info, ckpts = os.path.join(workdir, "run_info.json"), os.path.join(workdir, "checkpoints")
    steps = sorted(n for n in os.listdir(ckpts) if n.isdigit()) if os.path.isdir(ckpts) else []
    if steps:
        if "run_info.json" not in names:
            raise ValueError(f"{workdir} holds checkpoints (steps {', '.join(steps)}) but no run_info.json, so the "
                             "config they were made with cannot be compared with this one; start in a new --workdir")
        what = "checkpoints of a run"
    else:
        foreign = sorted(names - RUN_START)
        if foreign:
            raise ValueError(f"{workdir} holds files that are not a run's ({', '.join(foreign[:4])}"
                             f"{', ...' if len(foreign) > 4 else ''}) and no checkpoint; choose a new or empty "
                             "--workdir")
        if "run_info.json" not in names:
            raise ValueError(f"{workdir} holds files of a run ({', '.join(sorted(names))}) but no run_info.json "
                             "and no checkpoint; choose a new or empty --workdir")
        what = "the start of a run (no checkpoint yet)"
    changes = config_changes(_stored_config(info), _plain(config))
    refused = [c for c in changes if c[0] not in safe]
    if refused:
        listed = "; ".join(f"config.{k}: {a!r} in the run, {b!r} now" for k, a, b in refused)
        raise ValueError(f"{workdir} holds {what} made with another config ({listed}); resume it with "
                         "the same settings, or start in a new --workdir")
    for k, a, b in changes:
        print(f"note: resuming {workdir} with config.{k} = {b!r} (the run had {a!r}; it changes no result)")


def _finite(state, stats) -> str:
    """'' when state's parameters and every loss / gradient norm in stats are finite, else what is not."""
    bad = [k for k, v in (stats or {}).items() if ("loss" in k or k == "grad_norm")
           and not math.isfinite(float(np.asarray(jax.device_get(v)).mean()))]
    params = getattr(state, "params", None)
    if params is not None and not all(bool(jax.device_get(jax.numpy.isfinite(x).all()))
                                      for x in jax.tree.leaves(params)):
        bad.append("parameters")
    return ", ".join(bad)


class Run:
    """A run folder (module docstring). eval_key: the step's name in eval.jsonl ("update", "round")."""

    def __init__(self, workdir: str, config, keep: int, eval_key: str = "step",
                 safe: frozenset[str] = SAFE_ON_RESUME):
        check_resume(workdir, config, safe)  # before anything in the folder is touched
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
        last) (logs, evaluations, progress), then a checkpoint every ckpt_every steps and at the last, each
        only when the state's parameters and the step's losses are finite (else `Diverged`, the last good
        checkpoint kept)."""
        while more(state, done):
            state, stats = step(state)
            done += 1
            last = not more(state, done)
            after(done, state, stats, last)
            if done % ckpt_every == 0 or last:
                if bad := _finite(state, stats):
                    good = self.ckpt.latest_step()
                    self.close()
                    kept = (f"{self.workdir}/checkpoints keeps {self.eval_key} {good}, the last good one"
                            if good is not None else "no checkpoint was written")
                    raise Diverged(f"{self.eval_key} {done}: non-finite {bad} (the training diverged); not "
                                   f"checkpointed: {kept}. Start again in a new --workdir with a lower learning rate.")
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
