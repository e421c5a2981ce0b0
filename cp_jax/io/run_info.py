"""What every run writes beside its outputs: the resolved config, git revision, versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def git_revision() -> str:
    """The checkout's commit (with '+dirty' when it has uncommitted changes), or 'unknown'."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_run_info(out_dir: str, config) -> str:
    """Write run_info.json (config as JSON, argv, git revision, versions, time); returns its path."""
    import jax

    os.makedirs(out_dir, exist_ok=True)
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    info = dict(
        config=cfg, argv=sys.argv, git_revision=git_revision(), jax_version=jax.__version__,
        backend=jax.default_backend(), xla_flags=os.environ.get("XLA_FLAGS", ""),
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    path = os.path.join(out_dir, "run_info.json")
    with open(path, "w") as f:
        json.dump(info, f, indent=2, default=str)
    return path
