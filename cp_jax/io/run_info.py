"""What every run writes beside its outputs: the resolved config, git revision, versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def git_revision() -> str:
    """The checkout's commit (with '+dirty' when it has uncommitted changes outside results/, whose cells
    are outputs, not code), or 'unknown'."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ":(top)", ":(top,exclude)results"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
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
    with open(path + ".tmp", "w") as f:  # renamed into place: a kill never leaves half a file to refuse
        json.dump(info, f, indent=2, default=str)
    os.replace(path + ".tmp", path)
    return path


def _run_dir(folder: str) -> str | None:
    """The run folder of a policy: `folder` itself (a workdir or an exported asset) or, for a
    workdir's policy/ subfolder, its parent; None when neither has a run_info.json."""
    for d in (folder, os.path.dirname(os.path.normpath(folder))):
        if os.path.exists(os.path.join(d, "run_info.json")):
            return d
    return None


def lineage(folder: str) -> list[dict]:
    """The training runs that made the policy in `folder`, newest first, following each run's
    config.init_from: one dict per run with `run` (folder), `command` (its argv), `git_revision`,
    `updates` and `agent_steps` (simulated transitions; 0 for a behaviour clone, which trains on
    logs). An exported folder whose eval.json already holds a `lineage` returns that list. A start
    that is no longer on disk ends the list with {"run": path, "missing": True}."""
    d = _run_dir(folder)
    if d is None:
        return [dict(run=folder, missing=True)]
    ev_path = os.path.join(d, "eval.json")
    ev = {}
    if os.path.exists(ev_path):
        with open(ev_path) as f:
            ev = json.load(f)
    if "lineage" in ev:
        return list(ev["lineage"])
    with open(os.path.join(d, "run_info.json")) as f:
        info = json.load(f)
    entry = dict(run=d, command=info.get("argv", []), git_revision=info.get("git_revision", "unknown"),
                 updates=ev.get("updates", 0), agent_steps=float(ev.get("agent_steps", 0.0)))
    start = info.get("config", {}).get("init_from") or ""
    return [entry] + (lineage(start) if start else [])


def lineage_agent_steps(runs: list[dict]) -> float:
    """Simulated transitions of a whole lineage (runs missing from disk count 0)."""
    return float(sum(r.get("agent_steps", 0.0) for r in runs))
