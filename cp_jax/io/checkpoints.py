"""Checkpoints of a training run: a thin wrapper over orbax's CheckpointManager.

A checkpoint is one pytree of arrays (params, optimizer state, raw uint32 PRNG key data, counters) per step,
written to `<directory>/<step>` by orbax's atomic tmp-dir + rename, so a reader never sees a half-written step.
A killed save leaves `<step>.orbax-checkpoint-tmp-*`, which is not a step; it is ignored by `restore` and removed
by the next `save`. A step directory that cannot be read (bogus, truncated) is skipped with a warning; a folder
with no readable step is refused (ValueError naming it).
"""

from __future__ import annotations

import os
import shutil
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

TMP_MARKER = ".orbax-checkpoint-tmp"  # orbax names an unfinished save `<step>.orbax-checkpoint-tmp-<time>`
CORRUPT_SUFFIX = ".corrupt"  # a skipped step directory is moved to `<step>.corrupt-<time>` before a later save


def _check_no_typed_keys(tree, what: str) -> None:
    """Raise TypeError if `tree` holds a typed PRNG key array (store jax.random.key_data instead)."""
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
        dtype = getattr(x, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            raise TypeError(f"{what}: leaf {jax.tree_util.keystr(path)} is a typed PRNG key array ({dtype}); "
                            "checkpoint jax.random.key_data(key) and rebuild it with jax.random.wrap_key_data.")


def _to_saveable(x):
    """numpy scalars become 0-d arrays (orbax rejects np.generic); everything else is saved as is."""
    return np.asarray(x) if isinstance(x, np.generic) else x


def _to_target(x):
    """Restore target for one leaf of `like`: jax arrays -> ShapeDtypeStruct on the same sharding."""
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return _to_saveable(x)


def _from_restored(restored, like):
    """Give numpy-scalar leaves of `like` back as numpy scalars."""
    return jax.tree.map(lambda r, x: r[()] if isinstance(x, np.generic) else r, restored, like)


def _check_against_metadata(target, metadata, step: int) -> None:
    """Raise ValueError if the paths, shapes or dtypes of `target` differ from the stored step's metadata.

    orbax itself rejects shape and structure mismatches but silently casts dtypes.
    """
    have = {k: v for k, v in ocp.tree.to_flat_dict(metadata).items() if v is not None}
    want = ocp.tree.to_flat_dict(ocp.tree.serialize_tree(target))
    if have.keys() != want.keys():
        only_stored, only_like = sorted(have.keys() - want.keys())[:5], sorted(want.keys() - have.keys())[:5]
        raise ValueError(f"checkpoint step {step} does not match `like`: only stored {only_stored}, "
                         f"only in `like` {only_like}")
    for key, w in want.items():
        if isinstance(w, int | float | bool):
            continue  # Python scalars come back with their own type whatever the stored dtype
        h = have[key]
        if tuple(w.shape) != tuple(h.shape) or np.dtype(w.dtype) != np.dtype(h.dtype):
            raise ValueError(f"checkpoint step {step} leaf {'/'.join(key)}: stored {h.dtype}{list(h.shape)}, "
                             f"`like` wants {w.dtype}{list(w.shape)}")


class Checkpointer:
    """Saves and restores one pytree per step under `directory`, keeping the newest `keep` steps."""

    def __init__(self, directory: str | os.PathLike, keep: int = 3):
        self.directory = os.path.abspath(os.fspath(directory))
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        # An explicit single-item handler: without it orbax infers the layout from the newest step directory,
        # and a bogus one makes every later save and restore fail.
        self._manager = ocp.CheckpointManager(self.directory, item_handlers=ocp.StandardCheckpointHandler(),
                                              options=options)
        self._bad_steps: set[int] = set()  # steps that failed to restore, moved aside by the next save
        self._tmp_cleaned = False

    def latest_step(self) -> int | None:
        """The newest finished step on disk (not checked for readability), or None."""
        self._manager.reload()
        return self._manager.latest_step()

    def save(self, step: int, tree) -> None:
        """Write `tree` as `step` and wait until it is on disk; raises if `step` is not after every good step."""
        _check_no_typed_keys(tree, "Checkpointer.save")
        step = int(step)
        if jax.process_index() == 0:
            self._remove_unfinished_saves()
            self._move_aside(s for s in self._bad_steps if s >= step)
        self._manager.reload()
        newer = [s for s in self._manager.all_steps() if s >= step]
        if newer:
            raise ValueError(f"cannot save step {step} in {self.directory}: it already holds steps {sorted(newer)}")
        saved = self._manager.save(step, args=ocp.args.StandardSave(jax.tree.map(_to_saveable, tree)), force=True)
        self._manager.wait_until_finished()
        if not saved:
            raise RuntimeError(f"orbax declined to save step {step} in {self.directory}")

    def restore(self, like, step: int | None = None):
        """(step, tree) for `step` (default: the newest readable one), shaped and typed like `like`; None if empty.

        `like` is a concrete or abstract (jax.ShapeDtypeStruct) pytree. With `step=None`, unreadable newer steps
        are skipped with a warning; if no step is readable this raises ValueError naming the folder. A mismatch
        with `like` always raises.
        """
        _check_no_typed_keys(like, "Checkpointer.restore")
        target = jax.tree.map(_to_target, like)
        self._manager.reload()
        steps = sorted(self._manager.all_steps(), reverse=True)
        for tmp in self._unfinished_saves():
            logging.warning("Checkpointer: ignoring unfinished save %s", tmp)
        if step is not None:
            return int(step), _from_restored(self._restore_step(int(step), target), like)
        if not steps:
            return None
        errors = []
        for s in steps:
            try:
                return s, _from_restored(self._restore_step(s, target), like)
            except UnreadableCheckpointError as e:
                path = self._manager.directory / str(s)
                logging.warning("Checkpointer: skipping unreadable checkpoint %s (%s: %s)", path,
                                type(e.__cause__).__name__, str(e.__cause__)[:300])
                self._bad_steps.add(s)
                errors.append(e)
        cause = errors[0].__cause__
        first = " ".join(str(cause).split())[:200] if cause is not None else ""
        raise ValueError(f"{self.directory}: no readable checkpoint (steps {steps} are damaged; step {steps[0]}: "
                         f"{type(cause).__name__}: {first}); move the folder aside or start in a new --workdir"
                         ) from errors[0]

    def close(self) -> None:
        """Release orbax's resources."""
        self._manager.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _restore_step(self, step: int, target):
        """Restore one step: a `like` mismatch raises ValueError, anything unreadable UnreadableCheckpointError."""
        try:
            metadata = self._manager.item_metadata(step)
            stored = getattr(metadata, "tree", None)
            if stored is None:
                raise FileNotFoundError(f"no item metadata in step {step}")
        except Exception as e:
            raise UnreadableCheckpointError(f"cannot read checkpoint step {step} in {self.directory}") from e
        _check_against_metadata(target, stored, step)
        try:
            return self._manager.restore(step, args=ocp.args.StandardRestore(target))
        except Exception as e:
            raise UnreadableCheckpointError(f"cannot read checkpoint step {step} in {self.directory}") from e

    def _unfinished_saves(self) -> list[str]:
        if not os.path.isdir(self.directory):
            return []
        return sorted(os.path.join(self.directory, n) for n in os.listdir(self.directory) if TMP_MARKER in n)

    def _remove_unfinished_saves(self) -> None:
        """Delete tmp directories left by killed saves (once per Checkpointer, before its first save)."""
        if self._tmp_cleaned:
            return
        for tmp in self._unfinished_saves():
            logging.warning("Checkpointer: removing unfinished save %s", tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        self._tmp_cleaned = True

    def _move_aside(self, steps) -> None:
        """Rename unreadable step directories to `<step>.corrupt-<time>` so they no longer count as steps."""
        for s in sorted(steps):
            src = os.path.join(self.directory, str(s))
            dst = f"{src}{CORRUPT_SUFFIX}-{time.time_ns()}"
            if os.path.isdir(src):
                logging.warning("Checkpointer: moving unreadable checkpoint %s to %s", src, dst)
                os.rename(src, dst)
            self._bad_steps.discard(s)


class UnreadableCheckpointError(RuntimeError):
    """A step directory that exists but cannot be read; the cause is chained."""
