"""Run logs: scalars per step to `metrics.jsonl` and TensorBoard event files, and a progress bar."""

from __future__ import annotations

import json
import math
import os

import numpy as np
from absl import logging

JSONL_NAME = "metrics.jsonl"
TB_DIR = "tb"


def _to_number(key: str, value) -> int | float:
    """A Python int (for integer/bool values) or float from a Python, numpy or jax scalar."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"metric {key!r} is not a scalar (shape {arr.shape})")
    if arr.dtype.kind in "biu":
        return int(arr.reshape(()))
    return float(arr.reshape(()))


def json_safe(x):
    """x with every non-finite float (nan: no spread over one seed, no matched pair) as None, through
    dicts, lists and tuples, so json.dump writes strict JSON."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """All records of a JSONL file; an unparsable line (e.g. cut by a kill) is skipped with a warning."""
    records = []
    with open(path) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                logging.warning("read_jsonl: skipping unparsable line %d of %s", i + 1, path)
    return records


def truncate_jsonl(path: str | os.PathLike, key: str, step: int) -> None:
    """Drop the lines of a JSONL log whose `key` is after `step` (a resumed run writes them again)."""
    if os.path.exists(path):
        rows = [r for r in read_jsonl(path) if r[key] <= step]
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


class MetricWriter:
    """Appends `{"step": step, **scalars}` lines to `<workdir>/metrics.jsonl` and scalars to `<workdir>/tb`.

    enabled=False (the other processes of a multi-host run) writes nothing and opens no file."""

    def __init__(self, workdir: str | os.PathLike, tensorboard: bool = True, enabled: bool = True):
        self.workdir = os.fspath(workdir)
        self.path = os.path.join(self.workdir, JSONL_NAME)
        self.enabled = enabled
        self._tb = None
        if not enabled:
            return
        os.makedirs(self.workdir, exist_ok=True)
        self._file = open(self.path, "a")  # an existing log is continued; see truncate_after
        self._tensorboard = tensorboard
        self._tb = self._open_tb() if tensorboard else None

    def _open_tb(self, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        return SummaryWriter(logdir=os.path.join(self.workdir, TB_DIR), purge_step=purge_step)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Log `scalars` at `step`; non-finite values become JSON null (with a warning) and are left out of TB."""
        if not self.enabled:
            return
        step = int(step)
        record = {"step": step}
        bad = []
        for key, value in scalars.items():
            x = _to_number(key, value)
            if isinstance(x, float) and not math.isfinite(x):
                bad.append(key)
                x = None
            elif self._tb is not None:
                self._tb.add_scalar(key, x, global_step=step)
            record[key] = x
        if bad:
            logging.warning("MetricWriter: non-finite %s at step %d (written as null)", ", ".join(bad), step)
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def truncate_after(self, step: int) -> None:
        """Drop logged steps > `step` (call after restoring the checkpoint at `step`, before writing again).

        The JSONL file is rewritten atomically; TensorBoard is told to discard events after `step` (purge_step).
        """
        if not self.enabled:
            return
        self._file.close()
        kept = [r for r in read_jsonl(self.path) if r.get("step", -1) <= step]
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in kept)
        os.replace(tmp, self.path)
        self._file = open(self.path, "a")
        if self._tb is not None:
            self._tb.close()
            self._tb = self._open_tb(purge_step=int(step) + 1)

    def flush(self) -> None:
        """Push buffered lines and events to disk."""
        if not self.enabled:
            return
        self._file.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        """Flush and close both outputs."""
        if self.enabled and not self._file.closed:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Progress:
    """A tqdm bar over `unit`s (agent-steps, updates, epochs): its rate in units/s, the ETA from the
    measured rate, and an optional postfix of scalars."""

    def __init__(self, total_steps: int, desc: str, initial: int = 0, disable: bool = False,
                 unit: str = "agent-steps"):
        from tqdm import tqdm

        self._bar = tqdm(total=int(total_steps), initial=int(initial), desc=desc, disable=disable,
                         unit=f" {unit}", unit_scale=unit == "agent-steps", dynamic_ncols=True, smoothing=0.1)

    def update(self, n_steps: int, postfix: dict[str, float] | None = None) -> None:
        """Advance by `n_steps` units; `postfix` scalars are shown after the rate."""
        if postfix:
            self._bar.set_postfix({k: f"{float(np.asarray(v)):.4g}" for k, v in postfix.items()}, refresh=False)
        self._bar.update(int(n_steps))

    def close(self) -> None:
        """Finish the bar."""
        self._bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
