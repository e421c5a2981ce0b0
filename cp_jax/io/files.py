"""Files written whole or not at all."""

from __future__ import annotations

import json
import os


def write_json(path: str, value, indent: int | None = None) -> None:
    """value as JSON at path, written under path.tmp and renamed into place (a reader never sees half)."""
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=indent)
    os.replace(path + ".tmp", path)
