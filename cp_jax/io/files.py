"""Files written whole or not at all."""

from __future__ import annotations

import json
import os
import shutil


def write_json(path: str, value, indent: int | None = None) -> None:
    """value as JSON at path, written under path.tmp and renamed into place (a reader never sees half)."""
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=indent)
    os.replace(path + ".tmp", path)


def check_out(out: str, results: tuple[str, ...], overwrite: bool, what: str) -> None:
    """Refuse (ValueError naming --out) an out that is a file, or that holds any of `results` (file names)
    unless overwrite; `what` names what the tool writes there."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out={out}: a file, not a folder (where {what} is written)")
    held = [name for name in results if os.path.exists(os.path.join(out, name))]
    if held and not overwrite:
        raise ValueError(f"--out={out}: already holds {', '.join(held)}: give --overwrite to replace "
                         f"{'it' if len(held) == 1 else 'them'}, or choose another folder")


def remove(path: str) -> None:
    """Delete a folder or file if there is one."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def move_into_place(staged: str, dest: str) -> None:
    """Rename the complete folder `staged` to `dest`; whatever dest held (folder or file) stays whole under
    dest.old until the new one is in place, then is deleted."""
    old = dest + ".old"
    if os.path.lexists(dest):
        remove(old)
        os.replace(dest, old)
    os.replace(staged, dest)
    remove(old)
