"""Which scene files a command reads: the sorted files of a folder, optionally a slice of them.

    scene_files("../shared/data/womd_json", "*.json", "0:10", "--files")  # the first ten, by name

A slice picks the same files on every machine (sorted by name), so a training set and its held-out
set are two slices of one folder: "0:10" and "10:".
"""

from __future__ import annotations

import glob
import os


def parse_slice(spec: str, flag: str) -> slice:
    """'START:STOP' (either side may be empty) or '' (every file) -> slice; flag names it in errors."""
    if not spec:
        return slice(None)
    parts = spec.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, stop = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise ValueError(f"{flag}={spec!r}: expected START:STOP of the sorted files, e.g. 0:10 or 10:") from None
    if (start is not None and start < 0) or (stop is not None and stop < 0):
        raise ValueError(f"{flag}={spec!r}: START and STOP must be >= 0")
    return slice(start, stop)


def scene_files(src: str, pattern: str, spec: str = "", flag: str = "--files") -> list[str]:
    """The files of folder src matching pattern, sorted by name, then sliced by spec ('START:STOP').
    Raises ValueError naming src or flag when the folder is missing or the selection is empty."""
    if not src or not os.path.isdir(src):
        raise ValueError(f"--src={src!r}: not a folder")
    files = sorted(glob.glob(os.path.join(src, pattern)))
    if not files:
        raise ValueError(f"--src={src!r}: no {pattern} files")
    chosen = files[parse_slice(spec, flag)]
    if not chosen:
        raise ValueError(f"{flag}={spec!r}: selects none of the {len(files)} {pattern} files in {src!r}")
    return chosen
