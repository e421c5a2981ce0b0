"""Session set-up shared by every test module.

The suite's programs are compiled once per session and shared through jax's persistent compilation
cache in a fresh temporary folder: the subprocess tests (launchers, kill / resume, multi-device)
inherit it through the environment and load the programs an earlier process compiled (the same
HLO and flags) instead of compiling them again. Nothing persists between sessions.

The slowest modules are handed to the two xdist workers first (longest first; pyproject's addopts
keep this order with --no-loadscope-reorder, whose default would order modules by test count and
leave the few-but-long subprocess tests for the end, one worker finishing them while the other idles).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.support import TEST_XLA_FLAGS

# Tests are dominated by compiling small programs: XLA's optimisations are turned down for the whole
# session (this process and every subprocess test inherits it), which about halves compile times; the
# programs compute the same things, and both sides of every comparison are compiled the same way.
# Tests marked `optimized` run long programs (real scenes, 128 agents): they compile with XLA's
# optimisations.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # in-process runs match the subprocess tests' backend
# XLA's CPU fusion emitters off: about a third less compile time for the suite's programs at the same
# run time (docs/measurements/tests.md); separately compiled programs then agree to float rounding
# (tests/support.py: assert_same). Subprocess tests add their device count to these flags (xla_flags).
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()
_CACHE = tempfile.mkdtemp(prefix="cp_jax_xla_cache_")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")


# Measured per-module times, longest first (docs/measurements/tests.md); the rest keep collection order.
LONGEST_FIRST = ("test_train.py", "test_ppo.py", "test_bench.py", "test_parallel.py", "test_post_train.py",
                 "test_stream.py",
                 "test_counterplay.py", "test_env.py", "test_bc.py", "test_policy.py", "test_readers.py",
                 "test_procedural.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: modules stay whole


@pytest.fixture(autouse=True)
def _optimized(request):
    if request.node.get_closest_marker("optimized") is None:
        yield
        return
    import jax  # after the environment above is set: jax reads it when first imported

    before = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)
