"""Session set-up shared by every test module.

The suite's programs are compiled once per session and shared through jax's persistent compilation
cache in a fresh temporary folder: the subprocess tests (launchers, kill / resume, multi-device)
inherit it through the environment and load the programs an earlier process compiled (the same
HLO and flags) instead of compiling them again. Nothing persists between sessions.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="cp_jax_xla_cache_")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)
